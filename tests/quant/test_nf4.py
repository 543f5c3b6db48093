"""NF4: the codebook equal to bitsandbytes' table, and it beats absmax int4 on normal weights."""

import pytest
import torch

from llmlab.quant import (
    fake_quantize,
    nf4_codebook,
    nf4_dequantize,
    nf4_quantize,
    quant_error,
)


def test_nf4_codebook():
    values = nf4_codebook()
    assert values.shape == (16,) and torch.equal(values, values.sort().values)
    assert values[0] == -1 and values[-1] == 1 and (values == 0).sum() == 1
    assert (values > 0).sum() == 8 and (values < 0).sum() == 7
    # symmetric-ish: each negative value's mirror is near a positive one (a step is ~0.1)
    assert (-values[:7, None] - values[None, 8:]).abs().amin(1).max() < 0.05
    # the table bitsandbytes ships (functional.py, get_4bit_type("nf4")), bit for bit
    functional = pytest.importorskip("bitsandbytes.functional")
    assert torch.equal(values, functional.get_4bit_type("nf4", device="cpu"))


def test_nf4_beats_absmax_int4_on_normal_weights():
    torch.manual_seed(0)
    weight = torch.randn(64, 256)
    codes, absmax = nf4_quantize(weight, block_size=64)
    assert codes.max() <= 15 and absmax.shape == (weight.numel() // 64,)
    nf4 = quant_error(weight, nf4_dequantize(codes, absmax)).relative
    blocks = weight.reshape(-1, 64)  # the same storage: 4-bit codes and one scale per 64 values
    int4 = quant_error(blocks, fake_quantize(blocks, 4, True, "channel")).relative
    assert nf4 < 0.9 * int4
