"""What is wrong with this machine for the course: `diagnose()` turns an `EnvReport` into
problems, each with a concrete fix. A pure function of the report, so every problem is tested on
a fake machine (tests/helpers/fake_machines.py).
"""

import importlib.metadata
import re
from dataclasses import dataclass

from llmlab.env.probe import REQUIRED_PACKAGES, EnvReport
from llmlab.env.report import capability_text, gb_text, ram_origin
from llmlab.units import GB

MIN_RAM_AVAILABLE_BYTES = 4 * GB
MIN_DISK_FREE_BYTES = 5 * GB

INSTALL_FIX = (
    "run `make lab` (or `pip install -c constraints.txt -e '.[course]'`) "
    "to install the pinned stack"
)
FRAMEWORK_GPU_INSTALL = {
    "tensorflow": "pip install 'tensorflow[and-cuda]'",
    "jax": "pip install 'jax[cuda12]'",
}


@dataclass(frozen=True)
class Problem:
    severity: str  # "error" | "warning" | "info"
    message: str
    fix: str


def _major_minor(version: str | None) -> tuple[int, int] | None:
    """ "12.8" -> (12, 8), so that "12.10" sorts after "12.8"; None when unknown."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match[1]), int(match[2])) if match else None


def _base_torch_version(report: EnvReport) -> str:
    """ "2.13.0+cu128" -> "2.13.0", for the pip commands of the fixes."""
    return (report.torch_version or "<version>").split("+")[0]


def _package_problems(report: EnvReport) -> list[Problem]:
    problems = []
    if report.torch_version is None:
        message = "PyTorch cannot be imported (missing or broken)"
        problems.append(Problem("error", message, INSTALL_FIX))
    # torch has its own check above (it can also be installed but broken).
    missing = [n for n in REQUIRED_PACKAGES if n != "torch" and report.packages.get(n) is None]
    if missing:
        message = f"required packages missing: {', '.join(missing)}"
        problems.append(Problem("error", message, INSTALL_FIX))
    return problems


def oldest_supported_torch() -> str | None:
    """The oldest torch the course is tested with: the `torch>=` bound in pyproject.toml, as the
    installed llmlab states it (None when llmlab runs from a folder it was not installed from)."""
    try:
        requirements = importlib.metadata.requires("llmlab") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    bounds = [m[1] for r in requirements if (m := re.match(r"torch\s*>=\s*([\d.]+)", r))]
    return bounds[0] if bounds else None


def _old_torch_problems(report: EnvReport, oldest: str | None = None) -> list[Problem]:
    oldest = oldest or oldest_supported_torch()
    installed = _major_minor(report.torch_version)
    if oldest is None or installed is None or installed >= _major_minor(oldest):
        return []
    message = f"PyTorch {report.torch_version} is older than the course supports ({oldest} on)"
    fix = (f"upgrade it (`pip install 'torch>={oldest}'`, then restart the kernel), or on a hosted "
           "runtime choose a newer one")
    return [Problem("error", message, fix)]


def _driver_older_than_runtime(report: EnvReport) -> bool:
    driver, runtime = _major_minor(report.driver_cuda_version), _major_minor(report.cuda_runtime)
    return driver is not None and runtime is not None and driver < runtime


def _old_driver_problem(report: EnvReport, severity: str) -> Problem:
    driver, runtime = report.driver_cuda_version, report.cuda_runtime
    message = f"the NVIDIA driver supports CUDA {driver} but torch was built for CUDA {runtime}"
    if severity == "warning":
        # Same-major drivers still run it (CUDA minor-version compatibility), with rough edges.
        message += ": it runs, but code compiled at run time (torch.compile) may fail"
    fix = (
        f"update the NVIDIA driver to one that supports CUDA {runtime}, or install a torch build "
        f"for CUDA <= {driver} (https://pytorch.org/get-started/locally/)"
    )
    return Problem(severity, message, fix)


def _cuda_without_gpu_problem(report: EnvReport) -> Problem:
    """Why a CUDA build of torch sees no GPU."""
    if report.driver_cuda_version is None and report.nvidia_device_present:
        fix = "install the NVIDIA driver (Ubuntu: `sudo ubuntu-drivers install`), reboot, then "
        fix += "check with `nvidia-smi`"
        return Problem("error", "NVIDIA GPU present but no driver: torch cannot use it", fix)
    if report.driver_cuda_version is None:
        message = "CUDA build of torch on a machine without an NVIDIA GPU: it runs on CPU but "
        message += "carries GBs of CUDA libraries"
        fix = f"install the CPU wheel: `pip install torch=={_base_torch_version(report)} "
        fix += "--index-url https://download.pytorch.org/whl/cpu`"
        return Problem("warning", message, fix)
    if _driver_older_than_runtime(report):
        return _old_driver_problem(report, "error")
    message = f"NVIDIA driver found (CUDA {report.driver_cuda_version}) but torch sees no GPU"
    fix = "check that CUDA_VISIBLE_DEVICES is unset (or lists your GPUs) and that `nvidia-smi` "
    fix += "works; in a container, start it with `--gpus all`"
    return Problem("error", message, fix)


def _cuda_build_problems(report: EnvReport) -> list[Problem]:
    if report.torch_build != "cuda":
        return []
    if not report.gpus:
        return [_cuda_without_gpu_problem(report)]
    return [_old_driver_problem(report, "warning")] if _driver_older_than_runtime(report) else []


def _cpu_build_problems(report: EnvReport) -> list[Problem]:
    if report.torch_build != "cpu":
        return []
    if report.nvidia_device_present or report.driver_cuda_version:
        fix = (
            f"install a CUDA build: `pip install torch=={_base_torch_version(report)} --index-url "
            "https://download.pytorch.org/whl/cu126`, with a cuXYZ no newer than the CUDA version "
            "that `nvidia-smi` shows (https://pytorch.org/get-started/locally/)"
        )
        return [Problem("warning", "NVIDIA GPU present but torch is a CPU-only build", fix)]
    fix = "fine for learning; for the full profile use a GPU VM (see README)"
    return [Problem("info", "No CUDA GPU: the labs run at the smoke scale on CPU", fix)]


def _old_gpu_problems(report: EnvReport) -> list[Problem]:
    old_gpus = [gpu for gpu in report.gpus if gpu.capability < (7, 0)]
    if not old_gpus:
        return []
    names = sorted({f"{gpu.name} ({capability_text(gpu)})" for gpu in old_gpus})
    message = f"{', '.join(names)}: no tensor cores, so mixed precision (fp16/bf16) gives little"
    fix = "the labs still run (in fp32); for real speed-ups use a GPU of compute capability >= 7.0"
    return [Problem("warning", message, fix)]


def _framework_problems(report: EnvReport) -> list[Problem]:
    if not report.gpus:
        return []
    return [
        Problem(
            "warning",
            f"{framework.name} {framework.version} is installed but sees no GPU "
            f"(torch sees {len(report.gpus)})",
            f"the course only needs PyTorch; to use the GPU from {framework.name} too: "
            f"`{FRAMEWORK_GPU_INSTALL.get(framework.name, 'install its CUDA build')}`",
        )
        for framework in report.frameworks
        if framework.sees_gpu is False
    ]


def _resource_problems(report: EnvReport) -> list[Problem]:
    problems = []
    # 0 means the probe failed (psutil missing), which the package check already reports.
    if 0 < report.ram_available_bytes < MIN_RAM_AVAILABLE_BYTES:
        problems.append(Problem(
            "warning",
            f"only {gb_text(report.ram_available_bytes)} of RAM available "
            f"({ram_origin(report)}); the labs need about {gb_text(MIN_RAM_AVAILABLE_BYTES)} "
            "(model, optimizer state and data)",
            "close other notebooks and programs, or use a machine with more memory",
        ))
    if 0 < report.disk_free_bytes < MIN_DISK_FREE_BYTES:
        problems.append(Problem(
            "warning",
            f"only {gb_text(report.disk_free_bytes)} free on this disk; about "
            f"{gb_text(MIN_DISK_FREE_BYTES)} are needed (the virtual environment alone takes "
            "several GB, plus datasets and checkpoints)",
            "free some space, or work from a directory on a bigger disk",
        ))
    return problems


def diagnose(report: EnvReport) -> list[Problem]:
    """What is wrong with this machine for the course, each with a fix (a pure function)."""
    checks = (
        _package_problems, _old_torch_problems,
        _cuda_build_problems, _cpu_build_problems,
        _old_gpu_problems, _framework_problems, _resource_problems,
    )
    return [problem for check in checks for problem in check(report)]
