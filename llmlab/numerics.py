"""How far one tensor is from another: the one way the course measures it."""

import torch


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """||got - expected|| / ||expected|| (Frobenius norms, in float64): 0 for the same numbers.
    Against an all-zero `expected`, the absolute error ||got||."""
    if got.shape != expected.shape:
        raise ValueError(f"shapes differ: got {tuple(got.shape)}, expected {tuple(expected.shape)}")
    expected = expected.detach().double()
    difference = (got.detach().double() - expected).norm()
    norm = expected.norm()
    return float(difference / norm if norm > 0 else difference)


def accumulate(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sum `values` along the last dimension one term at a time, the running sum rounded to
    `dtype` after every add: what a kernel whose accumulator holds `dtype` computes. A float32
    tensor of the sums (the shape of `values` without its last dimension).

    torch's own reductions cannot show this: `x.bfloat16().sum()` adds in float32 inside the
    kernel and rounds only the result, as every matmul and reduction kernel does."""
    if not values.is_floating_point() or values.dim() == 0:
        raise ValueError(f"need a floating-point tensor with a last dimension to sum, got "
                         f"{values.dtype} of shape {tuple(values.shape)}")
    total = torch.zeros(values.shape[:-1], dtype=dtype, device=values.device)
    for column in values.detach().unbind(-1):
        total = (total.float() + column.float()).to(dtype)  # one add, then one rounding
    return total.float()


def flushed_accumulate(values: torch.Tensor, dtype: torch.dtype, block: int) -> torch.Tensor:
    """`accumulate` in `dtype` over each run of `block` terms, each partial sum then added into
    a float32 total: the accumulator's error stays that of `block` terms however long the sum
    (fp8 matmuls on GPUs whose tensor cores keep a narrow accumulator do this)."""
    if block < 1:
        raise ValueError(f"block must be a positive number of terms, got {block}")
    total = torch.zeros(values.shape[:-1], dtype=torch.float32, device=values.device)
    for start in range(0, values.shape[-1], block):
        total += accumulate(values[..., start : start + block], dtype)
    return total
