"""Honest timing, achieved matmul FLOP/s, a table of GPU peak figures, and MFU."""

import contextlib
import os
import re
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from llmlab.device import TORCH_DTYPES


@dataclass(frozen=True)
class Timing:
    """Seconds per call over the timed repeats (warm-up runs excluded)."""

    median_s: float
    min_s: float
    max_s: float
    times_s: tuple[float, ...]
    warmup: int


def busy_warning(load: float | None = None, cores: int | None = None) -> str | None:
    """A warning when other work competes for the cores, else None. Timings taken while the
    1-minute load average exceeds the core count measure the contention, not the code."""
    load = os.getloadavg()[0] if load is None else load
    cores = cores or os.cpu_count() or 1
    if load <= cores:
        return None
    return (f"WARNING: this machine is busy (load average {load:.1f} on {cores} cores): the "
            "timings below are slowed by other work. Re-run this cell when the machine is idle.")


def warn_if_busy() -> bool:
    """Print `busy_warning()` if there is one (call it at the top of a timing cell)."""
    warning = busy_warning()
    if warning:
        print(warning)
    return warning is not None


def time_fn(
    fn: Callable[[], object],
    *,
    warmup: int = 2,
    repeats: int = 5,
    device: torch.device | str | None = None,
) -> Timing:
    """Time `fn()`; pass the `device` it runs on so CUDA work is timed on the GPU's own clock."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats=} and {warmup=}")
    device = torch.device("cpu" if device is None else device)
    if device.type != "cuda":
        return _time_repeats(fn, warmup, repeats, _cpu_seconds)
    with torch.cuda.device(device):  # CUDA events and synchronize act on the current GPU
        return _time_repeats(fn, warmup, repeats, _cuda_seconds)


def time_rounds(
    fns: Mapping[str, Callable[[], object]],
    *,
    rounds: int = 3,
    warmup: int = 1,
    repeats: int = 5,
    device: torch.device | str | None = None,
) -> dict[str, list[Timing]]:
    """`time_fn` of each function in each of `rounds` rounds, the functions in turn within a
    round: a slow spell of a shared machine then falls on all of them alike, and the rounds
    show how far one median moves between runs."""
    if rounds < 1:
        raise ValueError(f"need rounds >= 1, got {rounds}")
    timings: dict[str, list[Timing]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            timings[name].append(time_fn(fn, warmup=warmup, repeats=repeats, device=device))
    return timings


def speedups(slow: Sequence[Timing], fast: Sequence[Timing]) -> tuple[float, ...]:
    """How many times faster `fast` ran than `slow` in each paired round of `time_rounds`."""
    if len(slow) != len(fast) or not slow:
        raise ValueError(f"need the same rounds (at least one) of both, got {len(slow)} and "
                         f"{len(fast)}")  # fmt: skip
    return tuple(s.median_s / f.median_s for s, f in zip(slow, fast, strict=True))


def _time_repeats(
    fn: Callable[[], object], warmup: int, repeats: int, seconds: Callable[[Callable], float]
) -> Timing:
    # The first calls pay for memory allocation, kernel selection and cold caches.
    for _ in range(warmup):
        fn()
    times = tuple(seconds(fn) for _ in range(repeats))
    # The median, because one slow outlier on a shared machine would drag a mean.
    return Timing(statistics.median(times), min(times), max(times), times, warmup)


def _cpu_seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _cuda_seconds(fn: Callable[[], object]) -> float:
    # CUDA kernels are asynchronous: a CPU clock alone would time only their launch,
    # so record events on the GPU stream and wait for the GPU to reach the end one.
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()  # start with an idle GPU, so earlier work is not counted
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000  # elapsed_time is in milliseconds


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of an (m x k) @ (k x n) matmul: a multiply and an add per term."""
    return 2 * m * n * k


DTYPES = ("fp32", "tf32", "bf16", "fp16")
# tf32 is not a tensor dtype: it is float32 tensors multiplied with TF32 tensor-core math.
_TORCH_DTYPES = {**TORCH_DTYPES, "tf32": torch.float32}


@dataclass(frozen=True)
class MatmulResult:
    """One timed square matmul: median seconds and the TFLOP/s it achieved."""

    size: int
    dtype: str
    device: str
    seconds: float
    tflops: float


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {DTYPES}")


def dtype_supported(dtype: str, device: torch.device | str) -> bool:
    """Whether `device` can run a matmul in `dtype` (tf32 needs an Ampere or newer NVIDIA GPU)."""
    _check_dtype(dtype)
    if dtype != "tf32":
        return True
    device = torch.device(device)
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


@contextlib.contextmanager
def _fp32_matmul_precision(dtype: str, device: torch.device) -> Iterator[None]:
    """On CUDA, make float32 matmuls use TF32 ("tf32") or full fp32 ("ieee"); restore after."""
    if device.type != "cuda" or dtype not in {"fp32", "tf32"}:
        yield
        return
    previous = torch.backends.cuda.matmul.fp32_precision
    # Set "ieee" explicitly for fp32, otherwise a global TF32 setting would make both rows equal.
    torch.backends.cuda.matmul.fp32_precision = "tf32" if dtype == "tf32" else "ieee"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.fp32_precision = previous


def measure_matmul(
    size: int,
    dtype: str,
    device: torch.device | str = "cpu",
    *,
    warmup: int = 2,
    repeats: int = 5,
) -> MatmulResult:
    """Time a square (size x size) @ (size x size) matmul in `dtype` on `device`."""
    device = torch.device(device)
    if not dtype_supported(dtype, device):
        raise ValueError("tf32 needs an Ampere or newer NVIDIA GPU")
    a = torch.randn(size, size, device=device, dtype=_TORCH_DTYPES[dtype])
    b = torch.randn(size, size, device=device, dtype=_TORCH_DTYPES[dtype])
    with _fp32_matmul_precision(dtype, device):
        timing = time_fn(lambda: a @ b, warmup=warmup, repeats=repeats, device=device)
    tflops = matmul_flops(size, size, size) / timing.median_s / 1e12
    return MatmulResult(size, dtype, str(device), timing.median_s, tflops)


def matmul_sweep(
    sizes: Sequence[int],
    dtypes: Sequence[str],
    device: torch.device | str = "cpu",
    *,
    warmup: int = 2,
    repeats: int = 5,
    progress: bool = True,
) -> list[MatmulResult]:
    """`measure_matmul` for every size and dtype, in that order.

    Combinations the device cannot run (tf32 off an Ampere-or-newer GPU) are skipped.
    """
    runnable = [(s, d) for s in sizes for d in dtypes if dtype_supported(d, device)]
    return [
        measure_matmul(size, dtype, device, warmup=warmup, repeats=repeats)
        for size, dtype in tqdm(runnable, desc="matmul", disable=not progress)
    ]


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
               "a100-40gb": "A100 40GB"}  # fmt: skip


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
    _check_dtype(dtype)
    spec = resolve_gpu_spec(gpu)
    return None if spec is None else spec.tflops[dtype]


def mfu(
    tokens_per_s: float, flops_per_token: float, peak_flops_per_s: float | None
) -> float | None:
    """Model FLOPs utilisation: the fraction of the peak the model's own FLOPs reach.

    None when the peak is unknown.
    """
    if tokens_per_s < 0 or flops_per_token < 0:
        raise ValueError(f"need non-negative inputs, got {tokens_per_s=} and {flops_per_token=}")
    if peak_flops_per_s is None:
        return None
    if peak_flops_per_s <= 0:
        raise ValueError(f"the peak must be positive, got {peak_flops_per_s=}")
    return tokens_per_s * flops_per_token / peak_flops_per_s


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


# A formatted number, maybe with a unit or suffix: "1,234", "-0.5", "12.0 s", "1.50x", "45%".
_NUMBER = re.compile(r"[-+]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?( ?[a-zA-Z%]+)?")


def markdown_table(rows: list[dict], aligned: bool = False) -> str:
    """Rows of the same keys as a Markdown table: readable in a terminal, pastable into a note.

    The course's one table builder. `aligned=True` pads each column to its widest cell, numbers
    to the right (marked `---:`), for tables read at a terminal; it renders as the same Markdown.
    """
    columns = list(rows[0])
    cells = [[str(row[column]) for column in columns] for row in rows]
    if not aligned:
        lines = [" | ".join(columns), " | ".join("---" for _ in columns)]
        return "\n".join(lines + [" | ".join(line) for line in cells])
    widths = [max(3, len(column), *(len(line[i]) for line in cells))
              for i, column in enumerate(columns)]  # fmt: skip
    right = [_numbers(line[i] for line in cells) for i in range(len(columns))]
    sides = list(zip(widths, right, strict=True))

    def join(values) -> str:  # rstrip: no padding after the last column
        padded = [v.rjust(w) if r else v.ljust(w) for v, (w, r) in zip(values, sides, strict=True)]
        return " | ".join(padded).rstrip()

    rule = " | ".join("-" * (w - 1) + ":" if r else "-" * w for w, r in sides)
    return "\n".join([join(columns), rule] + [join(line) for line in cells])


def _numbers(cells: Iterator[str]) -> bool:
    """Whether a column holds numbers: some cell reads as one, the others as one or a blank."""
    cells = [cell for cell in cells if cell not in ("", "-")]  # "-": no value (a placeholder)
    return bool(cells) and all(_NUMBER.fullmatch(cell) for cell in cells)
