"""The table of GPUs' datasheet figures (compute capability, memory, bandwidth, dense peak
TFLOP/s per dtype) and the one resolver from a name a user types or a device name to a row of it.
Plain data: importing it needs no torch, so the planner (llmlab.scale) stays arithmetic.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

# The dtypes the table gives peaks for, and that llmlab.matmul measures.
DTYPES = ("fp32", "tf32", "bf16", "fp16")


def check_dtype(dtype: str) -> None:
    """Refuse a dtype the table has no column for, naming the ones it has."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {DTYPES}")


@dataclass(frozen=True)
class GpuSpec:
    """A GPU's datasheet figures; `pattern` is searched (ignoring case) in its device name."""

    name: str
    pattern: str
    capability: tuple[int, int]
    memory_gb: float
    bandwidth_gbs: float
    tflops: Mapping[str, float | None]  # dense peak per dtype; None where the GPU lacks that math


# Figures are the vendors' dense datasheet peaks (no 2:4 sparsity; GeForce: fp32-accumulate
# rates); real matmuls reach roughly 60-80% of them.
# Each row: name, device-name pattern, compute capability, memory GB, bandwidth GB/s, TFLOP/s.
# Order matters: the first matching pattern wins, so more specific patterns come first.
# Patterns leave out variants with other figures (H100 NVL, A10G, RTX 4090 D/Laptop, ...),
# which then count as unknown rather than getting a wrong number.
GPU_SPECS: tuple[GpuSpec, ...] = (
    GpuSpec(
        "V100 SXM2", r"\bV100\b.*SXM2", (7, 0), 32, 900,
        {"fp32": 15.7, "tf32": None, "bf16": None, "fp16": 125},
    ),
    GpuSpec(
        "T4", r"\bT4\b", (7, 5), 16, 320,
        {"fp32": 8.1, "tf32": None, "bf16": None, "fp16": 65},
    ),
    GpuSpec(
        "A10", r"\bA10\b", (8, 6), 24, 600,
        {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125},
    ),
    # The 40 GB A100s (SXM and PCIe) compute as fast but have less memory bandwidth.
    GpuSpec(
        "A100 40GB", r"\bA100\b.*40GB", (8, 0), 40, 1555,
        {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
    ),
    GpuSpec(
        "A100 SXM 80GB", r"\bA100\b", (8, 0), 80, 2039,
        {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
    ),
    GpuSpec(
        "L4", r"\bL4\b", (8, 9), 24, 300,
        {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121},
    ),
    GpuSpec(
        "L40S", r"\bL40S\b", (8, 9), 48, 864,
        {"fp32": 91.6, "tf32": 183, "bf16": 362, "fp16": 362},
    ),
    GpuSpec(
        "RTX 3090", r"\bRTX 3090\s*$", (8, 6), 24, 936,
        {"fp32": 35.6, "tf32": 35.6, "bf16": 71, "fp16": 71},
    ),
    GpuSpec(
        "RTX 4090", r"\bRTX 4090\s*$", (8, 9), 24, 1008,
        {"fp32": 82.6, "tf32": 82.6, "bf16": 165, "fp16": 165},
    ),
    GpuSpec(
        "H100 PCIe", r"\bH100\b.*\bPCIe\b", (9, 0), 80, 2000,
        {"fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756},
    ),
    GpuSpec(  # its device name is "NVIDIA H100 80GB HBM3"
        "H100 SXM", r"\bH100\b.*\bHBM3\b", (9, 0), 80, 3350,
        {"fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989},
    ),
    GpuSpec(
        "H200", r"\bH200\b(?!.*\bNVL\b)", (9, 0), 141, 4800,
        {"fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989},
    ),
)


def find_gpu_spec(device_name: str) -> GpuSpec | None:
    """The spec whose pattern first matches `device_name`; None for hardware not in the table."""
    for spec in GPU_SPECS:
        if re.search(spec.pattern, device_name.strip(), re.IGNORECASE):
            return spec
    return None


# Short names people type (`llmlab plan --gpu h100`), for every function that takes a GPU's name.
GPU_ALIASES = {"h100": "H100 SXM", "h200": "H200", "a100": "A100 SXM 80GB",
               "a100-40gb": "A100 40GB"}


def resolve_gpu_spec(gpu: str | GpuSpec | None) -> GpuSpec | None:
    """A spec given as itself, by a short alias ("h100"), by its name in the table ("H100 SXM")
    or by a device name ("NVIDIA H100 80GB HBM3"); None for a GPU not in the table."""
    if gpu is None or isinstance(gpu, GpuSpec):
        return gpu
    name = gpu.strip().lower()
    by_name = {spec.name.lower(): spec for spec in GPU_SPECS}
    return by_name.get(GPU_ALIASES.get(name, name).lower()) or find_gpu_spec(gpu)


def gpu_names(dtype: str | None = None) -> list[str]:
    """What `resolve_gpu_spec` knows by name: the aliases, then the table's names (only the GPUs
    with a `dtype` peak, when one is given), for error messages."""
    return [*GPU_ALIASES, *(spec.name for spec in GPU_SPECS if dtype is None or spec.tflops[dtype])]


def peak_tflops(gpu: str | GpuSpec | None, dtype: str) -> float | None:
    """Dense peak TFLOP/s of `gpu` (a spec, a spec name or a device name) in `dtype`.

    None when the GPU is unknown or lacks that math: better no number than a wrong one.
    """
    check_dtype(dtype)
    spec = resolve_gpu_spec(gpu)
    return None if spec is None else spec.tflops[dtype]


def peak_table() -> list[dict]:
    """One row per GPU in `GPU_SPECS`, ready to show as a table in a notebook."""
    return [
        {
            "name": spec.name,
            "capability": f"{spec.capability[0]}.{spec.capability[1]}",
            "memory_gb": spec.memory_gb,
            "bandwidth_gbs": spec.bandwidth_gbs,
            **{dtype: spec.tflops[dtype] for dtype in DTYPES},
        }
        for spec in GPU_SPECS
    ]
