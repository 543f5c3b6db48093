"""Integer formats: int-k codes on a uniform grid, symmetric or asymmetric, with one scale (and
zero point) per tensor, per output channel or per group of input columns.

A weight is (out, in), as nn.Linear stores it; groups run along the input dimension, the one
the matmul sums over, so one group's scale multiplies a contiguous slice of each dot product.
Symmetric grids use the restricted range [-(2^(k-1) - 1), 2^(k-1) - 1] (zero exactly on the
grid, no lone extra negative code); asymmetric ones use [0, 2^k - 1] with a zero point.
"""

import numbers
from dataclasses import dataclass

import torch

from llmlab.models.finite import require_finite

MIN_BITS, MAX_BITS = 2, 8  # int codes stored in int8/uint8; 1 bit has no symmetric grid


def check_bits(bits: int) -> int:
    """An integer bit width the int formats support (2..8)."""
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral):
        raise TypeError(f"bits must be an integer from {MIN_BITS} to {MAX_BITS}, got {bits!r}")
    if not MIN_BITS <= bits <= MAX_BITS:
        raise ValueError(
            f"bits must be from {MIN_BITS} to {MAX_BITS} for int formats, got {bits}: "
            "for 16-bit use bf16/fp16, for 4-bit floats use the NF4 codebook (llmlab.quant.nf4)"
        )
    return int(bits)


def code_range(bits: int, symmetric: bool) -> tuple[int, int]:
    """(smallest, largest) integer code: int4 gives (-7, 7) symmetric, (0, 15) asymmetric."""
    bits = check_bits(bits)
    if symmetric:
        return -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def require_values(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """`tensor` itself, or a ValueError if it has no values (a grid is fit on values: there is
    none to fit, and torch's reshape or amax would fail with a message about itself)."""
    if tensor.numel() == 0:
        raise ValueError(
            f"{name} has shape {tuple(tensor.shape)}: no values, so no grid to fit. Leave an "
            "empty layer out of quantization (was it pruned to nothing, or sliced by mistake?)"
        )
    return tensor


def group_count(weight: torch.Tensor, granularity: str | int) -> tuple[int, int]:
    """(rows with their own scales, groups per row) for "tensor", "channel" or a group size."""
    if weight.dim() != 2:
        raise ValueError(
            f"expected a 2-D weight (out_features, in_features), got shape {tuple(weight.shape)}: "
            "reshape it first (e.g. activations to (tokens, features))"
        )
    require_values(weight, "the weight to quantize")
    rows, cols = weight.shape
    if granularity == "tensor":
        return 1, 1
    if granularity == "channel":
        return rows, 1
    if isinstance(granularity, bool) or not isinstance(granularity, numbers.Integral):
        raise ValueError(
            f"granularity must be 'tensor', 'channel' or an integer group size, got {granularity!r}"
        )
    if granularity <= 0 or cols % granularity:
        raise ValueError(
            f"group size {granularity} does not divide the input dimension {cols}: pick a "
            f"divisor of {cols} (e.g. 32, 64 or 128 if it divides), or 'channel' for one per row"
        )
    return rows, cols // granularity


def fit_grid(values: torch.Tensor, bits: int, symmetric: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, zero) for each row of `values` (..., n): the grid spans the row's range, which
    is widened to include 0 so that an exact zero weight stays exactly zero."""
    low, high = code_range(bits, symmetric)
    if symmetric:
        scale = values.abs().amax(-1) / high
        zero = torch.zeros_like(scale)
    else:
        vmin = values.amin(-1).clamp(max=0)
        vmax = values.amax(-1).clamp(min=0)
        scale = (vmax - vmin) / (high - low)
        zero = torch.round(-vmin / torch.where(scale > 0, scale, 1)).clamp(low, high)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero row: any scale
    return scale, zero


def to_codes(values, scale, zero, bits: int, symmetric: bool) -> torch.Tensor:
    """Round to nearest (ties to even, as torch.round) and clamp to the code range."""
    low, high = code_range(bits, symmetric)
    return (torch.round(values / scale) + zero).clamp(low, high)


@dataclass
class Quantized:
    """Integer codes of a (out, in) weight with a scale and zero point per group of
    `group_size` input columns (group_size = in for per-channel and per-tensor; scales and
    zeros then have one row, or one column)."""

    codes: torch.Tensor  # (out, in), int8 for symmetric grids, uint8 for asymmetric ones
    scales: torch.Tensor  # (out or 1, in / group_size)
    zeros: torch.Tensor  # same shape; all 0 for symmetric grids
    bits: int
    symmetric: bool
    group_size: int

    def dequantize(self) -> torch.Tensor:
        rows, cols = self.codes.shape
        codes = self.codes.float().view(rows, cols // self.group_size, self.group_size)
        return ((codes - self.zeros[..., None]) * self.scales[..., None]).view(rows, cols)


def quantize(
    weight: torch.Tensor, bits: int, symmetric: bool = False, granularity: str | int = "channel"
) -> Quantized:
    """Round-to-nearest int-`bits` codes with one grid per tensor, per output channel
    ("channel") or per group of `granularity` input columns."""
    check_bits(bits)
    rows, groups = group_count(weight, granularity)
    require_finite(weight, "the weight to quantize")  # one NaN would make its whole group NaN
    grouped = weight.detach().float().reshape(rows, groups, -1)
    scale, zero = fit_grid(grouped, bits, symmetric)
    codes = to_codes(grouped, scale[..., None], zero[..., None], bits, symmetric)
    dtype = torch.int8 if symmetric else torch.uint8
    return Quantized(
        codes.reshape(weight.shape).to(dtype),
        scale,
        zero,
        bits,
        symmetric,
        weight.shape[1] // groups,
    )


def fake_quantize(
    weight: torch.Tensor, bits: int, symmetric: bool = False, granularity: str | int = "channel"
) -> torch.Tensor:
    """Quantize then dequantize: the weight the quantized model really computes with."""
    return quantize(weight, bits, symmetric, granularity).dequantize().to(weight.dtype)
