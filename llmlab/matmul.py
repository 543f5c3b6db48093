"""How fast a matmul runs here: its FLOPs, a timed square matmul per dtype and size (the TFLOP/s
it reaches), and MFU, the share of a peak that a model's own FLOPs reach. MFU lives with the
matmul because the model's FLOPs are matmuls, and on a CPU, which has no datasheet peak, the peak
it is measured against is a timed matmul (llmlab.train.metrics).
"""

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from llmlab.device import TORCH_DTYPES, choose_dtype
from llmlab.gpu_specs import check_dtype
from llmlab.timing import time_fn


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of an (m x k) @ (k x n) matmul: a multiply and an add per term."""
    return 2 * m * n * k


# The largest emulated matmul a sweep times: bf16 emulated at about 1 GFLOP/s (a CPU without bf16
# instructions) takes seconds for one 1024 x 1024 matmul, a tenth of a second at 512.
EMULATED_UP_TO = 512

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


def dtype_supported(dtype: str, device: torch.device | str) -> bool:
    """Whether `device` can run a matmul in `dtype` (tf32 needs an Ampere or newer NVIDIA GPU)."""
    check_dtype(dtype)
    if dtype != "tf32":
        return True
    device = torch.device(device)
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


def emulated(dtype: str, device: torch.device | str) -> bool:
    """Whether `device` computes `dtype` without hardware for it: bf16 on a CPU without bf16
    instructions (llmlab.device's dtype rule reads them), where it is about 100x slower than
    fp32."""
    device = torch.device(device)
    return (dtype == "bf16" and device.type == "cpu"
            and choose_dtype(device).dtype != torch.bfloat16)


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
    emulated_up_to: int | None = EMULATED_UP_TO,
) -> list[MatmulResult]:
    """`measure_matmul` for every size and dtype, in that order.

    Combinations the device cannot run (tf32 off an Ampere-or-newer GPU) are skipped, and so are
    emulated ones (`emulated`) above `emulated_up_to` (None: every size).
    """
    runnable = [(s, d) for s in sizes for d in dtypes if dtype_supported(d, device)
                and not (emulated_up_to and s > emulated_up_to and emulated(d, device))]
    return [
        measure_matmul(size, dtype, device, warmup=warmup, repeats=repeats)
        for size, dtype in tqdm(runnable, desc="matmul", disable=not progress)
    ]


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
