"""Size accounting: the bits per weight count the scales and the zeros."""

import torch

from llmlab.quant import (
    bits_per_weight,
    quantize,
    quantized_bits,
    rtn,
)


def test_bits_per_weight_counts_scales_and_zeros():
    weight = torch.randn(32, 256)
    assert bits_per_weight(rtn(weight, 4, 128)) == 4 + 16 / 128 + 4 / 128
    assert bits_per_weight(quantize(weight, 8, True, "channel")) == 8 + 16 / 256
    assert quantized_bits(rtn(weight, 4, 64), zero_bits=16) == 32 * 256 * 4 + 32 * 4 * 32
