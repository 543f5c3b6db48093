"""The doctor's report as a reader sees it: aligned `key: value` lines in titled sections
(`format_report`), or JSON-ready data (`report_to_dict`). Problems are `diagnose`'s.
"""

import dataclasses

from llmlab.env.probe import OPTIONAL_PACKAGES, EnvReport, FrameworkInfo, GpuInfo
from llmlab.units import GB


def gb_text(size_bytes: int) -> str:
    """12_345_678_901 -> "12.3 GB", in the course's unit."""
    return f"{size_bytes / GB:.1f} GB"


def ram_origin(report: EnvReport) -> str:
    """Whose RAM the figures are: the host's, or a container's limit below it."""
    return "host" if report.ram_limit_file is None else f"container limit, {report.ram_limit_file}"


def capability_text(gpu: GpuInfo) -> str:
    """ "capability 9.0" for an H100."""
    return f"capability {gpu.capability[0]}.{gpu.capability[1]}"


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def _or_na(value: object) -> str:
    return "n/a" if value is None else str(value)


def _names(names: tuple[str, ...] | None) -> str:
    return "unknown" if names is None else ", ".join(names) or "none"


def _gpu_line(gpu: GpuInfo) -> str:
    return (
        f"{gpu.name} | {capability_text(gpu)} | {gb_text(gpu.total_memory_bytes)} | "
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
            ("RAM total", f"{gb_text(report.ram_total_bytes)} ({ram_origin(report)})"),
            ("RAM available", gb_text(report.ram_available_bytes)),
            ("disk free (here)", gb_text(report.disk_free_bytes)),
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
