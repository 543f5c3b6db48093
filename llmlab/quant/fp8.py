"""8-bit floats: torch.float8_e4m3fn (4 exponent bits, 3 mantissa bits) and torch.float8_e5m2
(5 and 2). A float spends its bits on range (exponent) or precision (mantissa); an int grid
spaces its codes evenly. Weights go through a scale first, so that their absmax lands on the
format's largest finite value and none of the format's range is wasted or overflows.

The formats come from Micikevicius et al. 2022, "FP8 Formats for Deep Learning": e4m3 for
weights and activations (more precision), e5m2 for gradients (more range).
"""

import math
from dataclasses import dataclass

import torch

from llmlab.device import TORCH_DTYPES
from llmlab.models.finite import require_finite
from llmlab.quant.error import QuantError, quant_error
from llmlab.quant.formats import fake_quantize, require_values

FP8_FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
GRANULARITIES = ("tensor", "channel")


def fp8_dtype(name: str) -> torch.dtype:
    """torch's dtype for "e4m3" or "e5m2"."""
    if name not in FP8_FORMATS:
        raise ValueError(f"unknown fp8 format {name!r}: use one of {', '.join(FP8_FORMATS)}")
    return FP8_FORMATS[name]


def fp8_formats_table() -> list[dict]:
    """One row per fp8 format (fp16 and bf16 beside them): largest finite value, smallest
    normal value, mantissa bits and the gap between 1 and the next number (torch.finfo)."""
    dtypes = {**FP8_FORMATS, "fp16": TORCH_DTYPES["fp16"], "bf16": TORCH_DTYPES["bf16"]}
    rows = []
    for name, dtype in dtypes.items():
        info = torch.finfo(dtype)
        rows.append({
            "format": name,
            "max": info.max,
            "smallest normal": info.smallest_normal,
            "mantissa bits": round(-math.log2(info.eps)),  # eps = 2^-mantissa bits
            "eps": info.eps,
        })
    return rows


@dataclass
class FP8Quantized:
    """fp8 values and the scale (one per tensor, or one per row) that brings them back."""

    values: torch.Tensor  # float8_e4m3fn or float8_e5m2, the tensor's shape
    scale: torch.Tensor  # float32, shape () per tensor or (rows, 1) per channel

    def dequantize(self) -> torch.Tensor:
        return self.values.float() * self.scale


def fp8_quantize(x: torch.Tensor, name: str = "e4m3", granularity: str = "tensor") -> FP8Quantized:
    """Scale `x` so its absmax (per tensor, or per row for "channel") is the format's largest
    finite value, then round to the fp8 dtype (torch rounds to nearest, ties to even)."""
    dtype = fp8_dtype(name)
    if granularity not in GRANULARITIES:
        raise ValueError(
            f"fp8 granularity must be one of {GRANULARITIES}, got {granularity!r}: groups of "
            "columns are an int-format choice (llmlab.quant.quantize)"
        )
    if granularity == "channel" and x.dim() != 2:
        raise ValueError(f"per-channel fp8 needs a 2-D tensor, got shape {tuple(x.shape)}")
    x = require_values(x, "the tensor to quantize")
    x = require_finite(x, "the tensor to quantize").detach().float()  # NaN would spoil the scale
    absmax = x.abs().amax() if granularity == "tensor" else x.abs().amax(-1, keepdim=True)
    scale = fp8_scale(absmax, dtype)
    return FP8Quantized(saturated_cast(x, scale, dtype), scale)


def fp8_scale(amax: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The scale that puts `amax` on the fp8 dtype's largest finite value: amax / max (x is
    stored as x / scale, and comes back as fp8 * scale)."""
    scale = amax / torch.finfo(dtype).max
    return torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero tensor: any scale


def saturated_cast(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x / scale in the fp8 dtype, clamped to +-its largest finite value first: float division
    can land a hair above max, a scale from an older amax further, and a cast past max gives inf
    (e5m2) or NaN (e4m3fn, which has no infinity, in torch before 2.12)."""
    limit = torch.finfo(dtype).max
    return (x / scale).clamp(-limit, limit).to(dtype)


def fp8_fake_quantize(
    x: torch.Tensor, name: str = "e4m3", granularity: str = "tensor"
) -> torch.Tensor:
    """Through fp8 and back: the values a model stored in this format would compute with."""
    return fp8_quantize(x, name, granularity).dequantize().to(x.dtype)


def format_errors(weight: torch.Tensor, granularity: str = "channel") -> dict[str, QuantError]:
    """The error of storing one weight in each 8- and 4-bit format, with the same granularity:
    fp8 e4m3 and e5m2 (absmax scaled), int8 and int4 (symmetric absmax grids)."""
    weight = weight.detach()  # a model parameter: errors are numbers, not part of a graph
    return {
        "fp8 e4m3": quant_error(weight, fp8_fake_quantize(weight, "e4m3", granularity)),
        "fp8 e5m2": quant_error(weight, fp8_fake_quantize(weight, "e5m2", granularity)),
        "int8": quant_error(weight, fake_quantize(weight, 8, True, granularity)),
        "int4": quant_error(weight, fake_quantize(weight, 4, True, granularity)),
    }
