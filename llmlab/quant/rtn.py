"""Round-to-nearest (RTN): the baseline every weight-only method is measured against. Each
group of `group_size` input columns of each row gets its own asymmetric int grid (a scale and
an integer zero point) and every weight is rounded to its nearest grid point, independently."""

import torch

from llmlab.quant.formats import Quantized, quantize


def rtn(weight: torch.Tensor, bits: int = 4, group_size: int = 128) -> Quantized:
    """Group-wise asymmetric int-`bits` RTN of a (out, in) weight: .codes, .scales, .zeros and
    .dequantize() (the weights it computes with)."""
    return quantize(weight, bits, symmetric=False, granularity=group_size)
