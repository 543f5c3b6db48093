"""What this machine is: CPU, memory, GPUs, NVIDIA driver, PyTorch build and the course's packages.

`collect()` probes the machine, `diagnose()` turns a report into problems with concrete fixes,
`format_report()` and `report_to_dict()` present it. Every probe degrades to None/"unknown" on
failure, so the doctor also works on a broken install. Bottom layer: imports no llmlab module.
"""

import ctypes
import dataclasses
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

GB = 10**9  # the course's unit: GB means 10^9 bytes, as GPU makers and papers use it
MB = 10**6  # and MB 10^6 (MiB, 2^20, only where a tool reports it: DCGM)

REQUIRED_PACKAGES: tuple[str, ...] = (
    "torch", "numpy", "transformers", "tokenizers", "datasets", "accelerate", "safetensors",
    "matplotlib", "tqdm", "psutil",
)  # fmt: skip
# The other packages the doctor lists: what needs each one, and how to get it.
OPTIONAL_PACKAGES: dict[str, str] = {
    "peft": "Lab 07 QLoRA's adapters; `make lab` installs it",
    "bitsandbytes": "Lab 07 NF4, LLM.int8() and QLoRA; `make lab` installs it",
    "gptqmodel": "Lab 07 GPTQ by library; `make lab` installs it",
    "optimum": "Lab 07 transformers' GPTQConfig; `make lab` installs it",
    "torchao": "Lab 07 int8 weights; `make lab` installs it",
    "jupyterlab": "the notebooks; `make lab` installs it",
    "ipywidgets": "notebook progress bars; `make lab` installs it",
    "nbval": "the notebook tests; `make lab` installs it",
}
COURSE_PACKAGES: tuple[str, ...] = (*REQUIRED_PACKAGES, *OPTIONAL_PACKAGES)

# x86 flags and arm64 features that decide which CPU kernels, and whether bf16, are fast.
CPU_FEATURES = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16",
    "amx_bf16", "amx_tile", "amx_int8", "asimd", "sve", "bf16",
)  # fmt: skip
CPU_BF16_FEATURES = ("avx512_bf16", "amx_bf16", "bf16")
# oneDNN runs PyTorch's CPU matmuls. Capped by ONEDNN_MAX_CPU_ISA below the instruction sets with
# bf16 (AVX2, as on most laptops) it emulates bf16 about 100x slower than fp32, whatever the CPU
# has: the way to try a laptop's speeds on a newer machine.
ONEDNN_BF16_ISAS = ("AVX2_VNNI_2", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX",
                    "AVX512_CORE_AMX_FP16", "AVX10_1_512", "AVX10_1_512_AMX",
                    "AVX10_1_512_AMX_FP16", "ALL")  # fmt: skip

MIN_RAM_AVAILABLE_BYTES = 4 * GB
MIN_DISK_FREE_BYTES = 5 * GB
CGROUP_ROOT = Path("/sys/fs/cgroup")
# (limit, usage, statistics, the statistic of droppable page cache): cgroup v2, then v1.
CGROUP_MEMORY_FILES = (
    ("memory.max", "memory.current", "memory.stat", "inactive_file"),
    ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat",
     "total_inactive_file"),
)  # fmt: skip
NVIDIA_PCI_VENDOR = "0x10de"
INFINIBAND_ROOT = Path("/sys/class/infiniband")  # one entry per InfiniBand/RoCE adapter (Linux)
NVIDIA_SMI_TIMEOUT_S = 20
FRAMEWORK_PROBE_TIMEOUT_S = 120  # importing TensorFlow alone can take half a minute

INSTALL_FIX = (
    "run `make lab` (or `pip install -c constraints.txt -e '.[course]'`) "
    "to install the pinned stack"
)
FRAMEWORK_GPU_INSTALL = {
    "tensorflow": "pip install 'tensorflow[and-cuda]'",
    "jax": "pip install 'jax[cuda12]'",
}
# Each probe prints the framework's version, then how many GPUs it sees.
FRAMEWORK_PROBES = {
    "tensorflow": "import tensorflow as tf; print(tf.__version__); "
    "print(len(tf.config.list_physical_devices('GPU')))",
    "jax": "import jax; print(jax.__version__); "
    "print(sum(d.platform in ('gpu', 'cuda', 'rocm') for d in jax.devices()))",
}

T = TypeVar("T")


@dataclass(frozen=True)
class CpuInfo:
    model: str
    logical_cores: int
    physical_cores: int | None
    features: tuple[str, ...]
    torch_capability: str | None  # the best SIMD level PyTorch's CPU kernels use, e.g. "AVX512"
    onednn_max_isa: str | None = None  # ONEDNN_MAX_CPU_ISA when set: the cap on oneDNN's kernels

    @property
    def fast_bf16(self) -> bool:
        """True when the CPU has bf16 instructions and oneDNN may use them, so bf16 autocast on
        CPU pays off."""
        if self.onednn_max_isa and self.onednn_max_isa.upper() not in ONEDNN_BF16_ISAS:
            return False
        return any(feature in self.features for feature in CPU_BF16_FEATURES)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    capability: tuple[int, int]
    total_memory_bytes: int
    multiprocessors: int

    @property
    def bf16(self) -> bool:
        return self.capability >= (8, 0)

    @property
    def tf32(self) -> bool:
        return self.capability >= (8, 0)

    @property
    def tensor_cores(self) -> str:
        """The number formats the tensor cores of this generation multiply natively."""
        if self.capability < (7, 0):
            return "none"
        if self.capability < (8, 0):
            return "fp16"
        formats = "fp16, bf16, tf32, int8"
        if self.capability >= (8, 9):  # Ada and Hopper added fp8
            formats += ", fp8"
        if self.capability >= (10, 0):  # Blackwell added fp4
            formats += ", fp4"
        return formats


@dataclass(frozen=True)
class FrameworkInfo:
    name: str
    version: str | None  # None = not installed
    sees_gpu: bool | None  # None = not installed or the probe failed
    detail: str


@dataclass(frozen=True)
class MemoryLimit:
    """A container's memory limit, as its control group (cgroup) sets it."""

    limit_file: Path
    limit_bytes: int
    used_bytes: int  # charged to the container, less the page cache the kernel can drop


@dataclass(frozen=True)
class Problem:
    severity: str  # "error" | "warning" | "info"
    message: str
    fix: str


@dataclass
class EnvReport:
    python: str
    platform: str
    cpu: CpuInfo
    ram_total_bytes: int  # 0 = unknown
    ram_available_bytes: int  # 0 = unknown
    ram_limit_file: str | None  # the container's limit, when it is below the host's RAM
    disk_free_bytes: int  # of the current directory; 0 = unknown
    torch_version: str | None
    torch_build: str  # "cpu" | "cuda" | "rocm" | "missing"
    cuda_runtime: str | None
    hip_runtime: str | None
    cudnn_version: str | None
    nccl_available: bool
    nccl_version: str | None
    nvidia_device_present: bool
    driver_version: str | None
    driver_cuda_version: str | None
    gpus: list[GpuInfo]
    interconnect: str | None
    packages: dict[str, str | None]
    frameworks: list[FrameworkInfo]
    # What NCCL and gloo would use (llmlab.jobs.nccl_env checks their variables on it).
    network_interfaces: tuple[str, ...] | None = None  # names with an address; None = unknown
    infiniband_devices: tuple[str, ...] = ()  # InfiniBand/RoCE adapters, e.g. ("mlx5_0",)
    nvlink_links: int | None = None  # active NVLink links over all GPUs; None = unknown or 1 GPU


# ---------------------------------------------------------------- probing the machine


def _safely(probe: Callable[[], T], fallback: T) -> T:
    """Run one probe of the machine; any failure means "unknown", never a crash."""
    try:
        return probe()
    except Exception:
        return fallback


def _read_text(path: Path) -> str:
    return _safely(lambda: path.read_text().strip(), "")


def nvidia_smi(args: Sequence[str] = ()) -> str | None:
    """Output of `nvidia-smi *args`, or None when the tool is missing, fails or hangs."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        result = subprocess.run(
            [executable, *args], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S
        )
    except (OSError, ValueError, subprocess.SubprocessError):  # ValueError: undecodable output
        return None
    return result.stdout if result.returncode == 0 else None


def _cpuinfo_fields() -> dict[str, str]:
    """First value of each key of /proc/cpuinfo (Linux only; {} elsewhere)."""
    fields: dict[str, str] = {}
    for line in _read_text(Path("/proc/cpuinfo")).splitlines():
        key, separator, value = line.partition(":")
        if separator:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _physical_cores() -> int | None:
    import psutil  # imported here: the doctor must still run when psutil is missing

    return psutil.cpu_count(logical=False)


def _cpu_info(torch: ModuleType | None) -> CpuInfo:
    fields = _cpuinfo_fields()
    # x86 lists its extensions under "flags", arm64 under "Features".
    present = set(fields.get("flags", "").split()) | set(fields.get("Features", "").split())
    return CpuInfo(
        model=fields.get("model name") or platform.processor() or "unknown",
        logical_cores=os.cpu_count() or 1,
        physical_cores=_safely(_physical_cores, None),
        features=tuple(feature for feature in CPU_FEATURES if feature in present),
        torch_capability=None if torch is None else _cpu_capability(torch),
        onednn_max_isa=os.environ.get("ONEDNN_MAX_CPU_ISA") or None,
    )


def cpu_info() -> CpuInfo:
    """This machine's CPU: model, cores and the vector features that decide fast kernels."""
    return _cpu_info(_import_torch())


def _cpu_capability(torch: ModuleType) -> str | None:
    return _safely(lambda: torch.backends.cpu.get_cpu_capability(), None)


def _memory_bytes() -> tuple[int, int]:
    """(total, available) RAM of the host in bytes (a container may be limited to less)."""
    import psutil  # imported here: the doctor must still run when psutil is missing

    memory = psutil.virtual_memory()
    return memory.total, memory.available


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    return int(text) if text.isdigit() else None  # None: missing, or "max" (no limit)


def _stat_value(path: Path, key: str) -> int:
    for line in _read_text(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.isdigit():
            return int(value)
    return 0


def container_memory_limit(root: Path) -> MemoryLimit | None:
    """The memory limit of the cgroup mounted at `root` (v2, else v1), or None where none is set."""
    for limit_name, usage_name, stat_name, cache_key in CGROUP_MEMORY_FILES:
        limit = _read_int(root / limit_name)
        if limit is None:
            continue
        # Page cache counts as used, but the kernel drops it when a program needs the memory
        # (`docker stats` subtracts it the same way).
        used = (_read_int(root / usage_name) or 0) - _stat_value(root / stat_name, cache_key)
        return MemoryLimit(root / limit_name, limit, max(used, 0))
    return None


def usable_ram(
    host_total: int, host_available: int, limit: MemoryLimit | None
) -> tuple[int, int, str | None]:
    """(total, available, limit file) of the RAM this process may use: the host's, or the
    container's limit where that is smaller (on Binder, 1-2 GB of a host with far more)."""
    if limit is None or limit.limit_bytes >= host_total:
        return host_total, host_available, None
    available = min(host_available, max(limit.limit_bytes - limit.used_bytes, 0))
    return limit.limit_bytes, available, str(limit.limit_file)


def _import_torch() -> ModuleType | None:
    try:
        import torch
    except Exception:  # a broken install (e.g. a missing CUDA library) must reach the doctor
        return None
    return torch


def _torch_build(torch: ModuleType) -> str:
    if getattr(torch.version, "hip", None):
        return "rocm"
    return "cuda" if torch.version.cuda else "cpu"


def _torch_gpus(torch: ModuleType) -> list[GpuInfo]:
    if not torch.cuda.is_available():
        return []
    return [_gpu_info(torch, index) for index in range(torch.cuda.device_count())]


def visible_gpus() -> list[GpuInfo]:
    """The CUDA GPUs torch sees, without the slow probes of `collect` (cheap at notebook start)."""
    torch = _import_torch()
    return [] if torch is None else _safely(lambda: _torch_gpus(torch), [])


def _gpu_info(torch: ModuleType, index: int) -> GpuInfo:
    properties = torch.cuda.get_device_properties(index)
    return GpuInfo(
        index=index,
        name=properties.name,
        capability=(properties.major, properties.minor),
        total_memory_bytes=properties.total_memory,
        multiprocessors=properties.multi_processor_count,
    )


def _format_cudnn(version: int) -> str:
    """91002 -> "9.10.2" (cuDNN >= 9 packs major * 10000), 8902 -> "8.9.2" (cuDNN 8: * 1000)."""
    major_unit = 10000 if version >= 90000 else 1000
    return f"{version // major_unit}.{version % major_unit // 100}.{version % 100}"


def _format_cuda_version(version: int) -> str:
    """12040 -> "12.4" (the CUDA driver API packs major * 1000 + minor * 10)."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _torch_fields(torch: ModuleType | None) -> dict[str, Any]:
    """The EnvReport fields that come from PyTorch."""
    if torch is None:
        return dict(
            torch_version=None,
            torch_build="missing",
            cuda_runtime=None,
            hip_runtime=None,
            cudnn_version=None,
            nccl_available=False,
            nccl_version=None,
            gpus=[],
        )
    gpus = _safely(lambda: _torch_gpus(torch), [])
    # cuDNN and NCCL versions are only meaningful (and only safe to query) with a usable GPU.
    cudnn = _safely(lambda: _format_cudnn(torch.backends.cudnn.version()), None) if gpus else None
    nccl = _safely(lambda: ".".join(map(str, torch.cuda.nccl.version())), None) if gpus else None
    return dict(
        torch_version=torch.__version__,
        torch_build=_torch_build(torch),
        cuda_runtime=torch.version.cuda,
        hip_runtime=getattr(torch.version, "hip", None),
        cudnn_version=cudnn,
        nccl_available=_safely(lambda: torch.distributed.is_nccl_available(), False),
        nccl_version=nccl,
        gpus=gpus,
    )


def _nvidia_device_present() -> bool:
    """True when the PCI bus holds an NVIDIA GPU, driver or not (Linux sysfs)."""
    for device in Path("/sys/bus/pci/devices").glob("*"):
        # Class 0x03xxxx is a display/3D controller: skips NVIDIA's audio functions and bridges.
        is_gpu = _read_text(device / "class").startswith("0x03")
        if is_gpu and _read_text(device / "vendor") == NVIDIA_PCI_VENDOR:
            return True
    return False


def _driver_version() -> str | None:
    output = nvidia_smi(["--query-gpu=driver_version", "--format=csv,noheader"])
    lines = output.strip().splitlines() if output else []
    return lines[0].strip() if lines else None


def _driver_cuda_version() -> str | None:
    """The newest CUDA the installed driver supports, asked from libcuda itself."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        status = libcuda.cuDriverGetVersion(ctypes.byref(version))
    except (OSError, AttributeError):
        return None
    return _format_cuda_version(version.value) if status == 0 else None


def _is_square_gpu_matrix(rows: list[list[str]]) -> bool:
    """Each GPU row has a cell per GPU, with "X" (itself) on the diagonal."""
    return len(rows) >= 2 and all(
        len(row) > len(rows) and row[1 + index] == "X" for index, row in enumerate(rows)
    )


def summarize_topology(matrix_text: str) -> str:
    """One line about the GPU-to-GPU links in `nvidia-smi topo -m`; the raw matrix if unparsable."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", matrix_text)  # newer nvidia-smi underlines the headers
    rows = [line.split() for line in text.splitlines() if re.match(r"GPU\d+\s", line)]
    if not _is_square_gpu_matrix(rows):
        return text.strip()
    count = len(rows)
    links = [rows[i][1 + j] for i in range(count) for j in range(i + 1, count)]
    nvlinks = sorted({link for link in links if link.startswith("NV")})
    others = sorted({link for link in links if not link.startswith("NV")})
    if not nvlinks:
        return f"PCIe only ({', '.join(others)})"
    if not others:
        return f"NVLink ({', '.join(nvlinks)}) between all pairs"
    nvlink_pairs = sum(link.startswith("NV") for link in links)
    return (
        f"NVLink ({', '.join(nvlinks)}) between {nvlink_pairs} of {len(links)} pairs, "
        f"PCIe ({', '.join(others)}) otherwise"
    )


def _interconnect(gpu_count: int) -> str | None:
    if gpu_count < 2:
        return None
    matrix = nvidia_smi(["topo", "-m"])
    return summarize_topology(matrix) if matrix else None


def network_interfaces() -> tuple[str, ...]:
    """The network interfaces that have an address, e.g. ("eth0", "lo"): those NCCL and gloo
    can bind to."""
    import psutil  # imported here: the doctor must still run when psutil is missing

    return tuple(sorted(psutil.net_if_addrs()))


def infiniband_devices(root: Path = INFINIBAND_ROOT) -> tuple[str, ...]:
    """The InfiniBand (and RoCE) adapters the kernel lists, e.g. ("mlx5_0", "mlx5_1")."""
    return tuple(sorted(path.name for path in root.iterdir())) if root.is_dir() else ()


def nvlink_active_links(nvml: ModuleType | None = None) -> int | None:
    """Active NVLink links summed over this machine's GPUs, read through NVML (nvidia-ml-py);
    0 where the GPUs talk over PCIe only, None where NVML cannot say (no driver, no nvidia-ml-py).
    `nvml` stands in for the pynvml module (tests pass a fake)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        return sum(
            _active_links(nvml, nvml.nvmlDeviceGetHandleByIndex(index))
            for index in range(nvml.nvmlDeviceGetCount())
        )
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()


def _active_links(nvml: ModuleType, handle: object) -> int:
    active = 0
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError:  # a link this GPU does not have; on a PCIe card, every link
            continue
        active += state == nvml.NVML_FEATURE_ENABLED
    return active


def _installed_version(distribution: str) -> str | None:
    return _safely(lambda: metadata.version(distribution), None)


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:160] if lines else ""


def _run_framework_probe(name: str) -> tuple[str, int]:
    """(version, GPU count) from a child process; raises with the child's last error line."""
    # A child process: TF or JAX next to torch in one process can clash over CUDA libraries, and
    # JAX would reserve most of the GPU memory of the caller (often a notebook kernel).
    quiet = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    result = subprocess.run(
        [sys.executable, "-c", FRAMEWORK_PROBES[name]],
        capture_output=True,
        text=True,
        timeout=FRAMEWORK_PROBE_TIMEOUT_S,
        env=quiet,
    )
    if result.returncode != 0:
        raise subprocess.SubprocessError(_last_line(result.stderr) or f"exit {result.returncode}")
    version, gpu_count = result.stdout.split()[-2:]
    return version, int(gpu_count)


def _probe_framework(name: str) -> FrameworkInfo:
    # find_spec does not import: TensorFlow's import is slow, so skip it when it is not there.
    if _safely(lambda: importlib.util.find_spec(name), None) is None:
        return FrameworkInfo(name, None, None, "not installed")
    try:
        version, gpu_count = _run_framework_probe(name)
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        return FrameworkInfo(name, "unknown", None, str(error)[:160])
    plural = "" if gpu_count == 1 else "s"
    return FrameworkInfo(name, version, gpu_count > 0, f"{gpu_count} GPU device{plural}")


def collect(include_frameworks: bool = True) -> EnvReport:
    """Probe this machine. TensorFlow/JAX are probed only when installed (and asked for)."""
    torch = _import_torch()
    torch_fields = _torch_fields(torch)
    host_total, host_available = _safely(_memory_bytes, (0, 0))
    ram_total, ram_available, ram_limit_file = usable_ram(
        host_total, host_available, container_memory_limit(CGROUP_ROOT)
    )
    frameworks = [_probe_framework(name) for name in FRAMEWORK_PROBES] if include_frameworks else []
    # NVLink joins the GPUs of one machine: with fewer than two it is not a question.
    nvlink = _safely(nvlink_active_links, None) if len(torch_fields["gpus"]) >= 2 else None
    return EnvReport(
        python=platform.python_version(),
        platform=platform.platform(),
        cpu=_cpu_info(torch),
        ram_total_bytes=ram_total,
        ram_available_bytes=ram_available,
        ram_limit_file=ram_limit_file,
        disk_free_bytes=_safely(lambda: shutil.disk_usage(Path.cwd()).free, 0),
        nvidia_device_present=_nvidia_device_present(),
        driver_version=_driver_version(),
        driver_cuda_version=_driver_cuda_version(),
        interconnect=_interconnect(len(torch_fields["gpus"])),
        packages={name: _installed_version(name) for name in COURSE_PACKAGES},
        frameworks=frameworks,
        network_interfaces=_safely(network_interfaces, None),
        infiniband_devices=_safely(infiniband_devices, ()),
        nvlink_links=nvlink,
        **torch_fields,
    )


# ---------------------------------------------------------------- diagnosing a report


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
    names = sorted({f"{gpu.name} ({_capability_text(gpu)})" for gpu in old_gpus})
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
            f"only {_gb(report.ram_available_bytes)} of RAM available ({_ram_origin(report)}); the "
            f"labs need about {_gb(MIN_RAM_AVAILABLE_BYTES)} (model, optimizer state and data)",
            "close other notebooks and programs, or use a machine with more memory",
        ))  # fmt: skip
    if 0 < report.disk_free_bytes < MIN_DISK_FREE_BYTES:
        problems.append(Problem(
            "warning",
            f"only {_gb(report.disk_free_bytes)} free on this disk; about "
            f"{_gb(MIN_DISK_FREE_BYTES)} are needed (the virtual environment alone takes several "
            "GB, plus datasets and checkpoints)",
            "free some space, or work from a directory on a bigger disk",
        ))  # fmt: skip
    return problems


def diagnose(report: EnvReport) -> list[Problem]:
    """What is wrong with this machine for the course, each with a fix (a pure function)."""
    checks = (
        _package_problems, _cuda_build_problems, _cpu_build_problems, _old_gpu_problems,
        _framework_problems, _resource_problems,
    )  # fmt: skip
    return [problem for check in checks for problem in check(report)]


# ---------------------------------------------------------------- presenting a report


def _gb(size_bytes: int) -> str:
    return f"{size_bytes / GB:.1f} GB"


def _ram_origin(report: EnvReport) -> str:
    """Whose RAM the figures are: the host's, or a container's limit below it."""
    return "host" if report.ram_limit_file is None else f"container limit, {report.ram_limit_file}"


def _capability_text(gpu: GpuInfo) -> str:
    return f"capability {gpu.capability[0]}.{gpu.capability[1]}"


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def _or_na(value: object) -> str:
    return "n/a" if value is None else str(value)


def _names(names: tuple[str, ...] | None) -> str:
    return "unknown" if names is None else ", ".join(names) or "none"


def _gpu_line(gpu: GpuInfo) -> str:
    return (
        f"{gpu.name} | {_capability_text(gpu)} | {_gb(gpu.total_memory_bytes)} | "
        f"{gpu.multiprocessors} SMs | bf16 {_yes_no(gpu.bf16)} | tf32 {_yes_no(gpu.tf32)} | "
        f"tensor cores: {gpu.tensor_cores}"
    )


def _gpu_rows(report: EnvReport) -> list[tuple[str, str]]:
    if not report.gpus:
        return [("GPUs", "none: no CUDA GPU visible to torch")]
    rows = [(f"GPU {gpu.index}", _gpu_line(gpu)) for gpu in report.gpus]
    if report.interconnect:
        rows.append(("interconnect", report.interconnect))
    return rows


def _package_status(name: str, version: str | None) -> str:
    if version is not None:
        return version
    if name in OPTIONAL_PACKAGES:
        return f"not installed (optional: {OPTIONAL_PACKAGES[name]})"
    return "missing"


def _framework_rows(frameworks: list[FrameworkInfo]) -> list[tuple[str, str]]:
    if not frameworks:
        return [("frameworks", "not checked")]
    return [
        (fw.name, fw.detail if fw.version is None else f"{fw.version} ({fw.detail})")
        for fw in frameworks
    ]


def _report_sections(report: EnvReport) -> dict[str, list[tuple[str, str]]]:
    cpu = report.cpu
    return {
        "Python / OS": [("python", report.python), ("platform", report.platform)],
        "CPU": [
            ("model", cpu.model),
            ("cores", f"{cpu.logical_cores} logical, {_or_na(cpu.physical_cores)} physical"),
            ("features", ", ".join(cpu.features) or "none detected"),
            ("torch CPU kernels", _or_na(cpu.torch_capability)),
            ("oneDNN capped at", _or_na(cpu.onednn_max_isa)),
            ("fast bf16", _yes_no(cpu.fast_bf16)),
        ],
        "Memory / disk": [
            ("RAM total", f"{_gb(report.ram_total_bytes)} ({_ram_origin(report)})"),
            ("RAM available", _gb(report.ram_available_bytes)),
            ("disk free (here)", _gb(report.disk_free_bytes)),
        ],
        "PyTorch": [
            ("torch", _or_na(report.torch_version)),
            ("build", report.torch_build),
            ("CUDA runtime", _or_na(report.cuda_runtime)),
            ("HIP runtime", _or_na(report.hip_runtime)),
            ("cuDNN", _or_na(report.cudnn_version)),
            ("NCCL", f"{_yes_no(report.nccl_available)}, version {_or_na(report.nccl_version)}"),
        ],
        "NVIDIA driver": [
            ("NVIDIA GPU on PCI", _yes_no(report.nvidia_device_present)),
            ("driver", _or_na(report.driver_version)),
            ("driver supports CUDA", _or_na(report.driver_cuda_version)),
        ],
        "GPUs": _gpu_rows(report),
        "Network": [
            ("interfaces", _names(report.network_interfaces)),
            ("InfiniBand/RoCE", ", ".join(report.infiniband_devices) or "none"),
            ("NVLink links", _or_na(report.nvlink_links)),
        ],
        "Packages": [
            (name, _package_status(name, version)) for name, version in report.packages.items()
        ],
        "TensorFlow / JAX": _framework_rows(report.frameworks),
    }


def format_report(report: EnvReport) -> str:
    """The report as aligned `key: value` lines in titled sections (problems are not included)."""
    sections = _report_sections(report)
    width = max(len(key) for rows in sections.values() for key, _ in rows) + 1
    lines = []
    for title, rows in sections.items():
        lines.append(f"== {title} ==")
        for key, value in rows:
            # Indent continuation lines (a raw topology matrix) under the value column.
            value = value.replace("\n", "\n" + " " * (width + 3))
            lines.append(f"  {key + ':':<{width}} {value}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def report_to_dict(report: EnvReport) -> dict:
    """The report as JSON-ready data, with the computed properties of the CPU and GPUs added."""
    data = dataclasses.asdict(report)
    data["cpu"]["fast_bf16"] = report.cpu.fast_bf16
    for gpu, gpu_data in zip(report.gpus, data["gpus"], strict=True):
        gpu_data.update(bf16=gpu.bf16, tf32=gpu.tf32, tensor_cores=gpu.tensor_cores)
    return data
