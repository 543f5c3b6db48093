"""Probing what this machine is: CPU, memory, GPUs, NVIDIA driver, PyTorch build and the course's
packages, gathered into one `EnvReport` by `collect()`.

Every probe degrades to None/"unknown" on failure, so the doctor also works on a broken install;
torch is imported inside the probes, so importing this module is quick. The links between GPUs
and machines are probed in `interconnect`; what is wrong with a report is `diagnose`'s, and how it
reads is `report`'s.
"""

import ctypes
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from llmlab.env.interconnect import (
    infiniband_devices,
    network_interfaces,
    nvlink_active_links,
    summarize_topology,
)

REQUIRED_PACKAGES: tuple[str, ...] = (
    "torch", "numpy", "transformers", "tokenizers", "datasets", "accelerate", "safetensors",
    "matplotlib", "tqdm", "psutil",
)
# The other packages the doctor lists: what needs each one, and how to get it.
OPTIONAL_PACKAGES: dict[str, str] = {
    "peft": "Lab 07 QLoRA's adapters; `make lab` installs it",
    "bitsandbytes": "Lab 07 NF4, LLM.int8() and QLoRA; `make lab` installs it",
    "gptqmodel": "Lab 07 GPTQ by library; `make lab` installs it",
    "optimum": "Lab 07 transformers' GPTQConfig; `make lab` installs it",
    "torchao": "Lab 07 int8 weights; `make lab` installs it",
    "trl": "Lab 10's chat labels and the losses its exercises are checked against; `make lab` "
           "installs it",
    "jupyterlab": "the notebooks; `make lab` installs it",
    "ipywidgets": "notebook progress bars; `make lab` installs it",
    "nbval": "the notebook tests; `make lab` installs it",
}
COURSE_PACKAGES: tuple[str, ...] = (*REQUIRED_PACKAGES, *OPTIONAL_PACKAGES)

# x86 flags and arm64 features that decide which CPU kernels, and whether bf16, are fast.
CPU_FEATURES = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16",
    "amx_bf16", "amx_tile", "amx_int8", "asimd", "sve", "bf16",
)
CPU_BF16_FEATURES = ("avx512_bf16", "amx_bf16", "bf16")
# oneDNN runs PyTorch's CPU matmuls. Capped by ONEDNN_MAX_CPU_ISA below the instruction sets with
# bf16 (AVX2, as on most laptops) it emulates bf16 about 100x slower than fp32, whatever the CPU
# has: the way to try a laptop's speeds on a newer machine.
ONEDNN_BF16_ISAS = ("AVX2_VNNI_2", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX",
                    "AVX512_CORE_AMX_FP16", "AVX10_1_512", "AVX10_1_512_AMX",
                    "AVX10_1_512_AMX_FP16", "ALL")

CGROUP_ROOT = Path("/sys/fs/cgroup")
# (limit, usage, statistics, the statistic of droppable page cache): cgroup v2, then v1.
CGROUP_MEMORY_FILES = (
    ("memory.max", "memory.current", "memory.stat", "inactive_file"),
    ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat",
     "total_inactive_file"),
)
NVIDIA_PCI_VENDOR = "0x10de"
NVIDIA_SMI_TIMEOUT_S = 20
FRAMEWORK_PROBE_TIMEOUT_S = 120  # importing TensorFlow alone can take half a minute

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


def _interconnect(gpu_count: int) -> str | None:
    if gpu_count < 2:
        return None
    matrix = nvidia_smi(["topo", "-m"])
    return summarize_topology(matrix) if matrix else None


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

