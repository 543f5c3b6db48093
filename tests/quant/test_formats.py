"""llmlab.quant's integer formats: exact grids on hand-made weights, the error ordering tensor >
channel > group, and the errors for bad input (NaN or inf weights refused by every format)."""

import re

import pytest
import torch

from llmlab.quant import (
    code_range,
    fake_quantize,
    format_errors,
    fp8_quantize,
    nf4_quantize,
    quant_error,
    quantize,
    rtn,
)


def test_code_ranges():
    assert code_range(4, symmetric=True) == (-7, 7)
    assert code_range(4, symmetric=False) == (0, 15)
    assert code_range(8, symmetric=True) == (-127, 127)
    assert code_range(2, symmetric=False) == (0, 3)


@pytest.mark.parametrize("symmetric", [True, False])
def test_values_on_the_grid_come_back_exactly(symmetric):
    # symmetric: codes -7..7; asymmetric: 16 codes on a range not centred on 0
    values = torch.arange(-7, 8) if symmetric else torch.arange(-5, 11)
    weight = (values.float() * 0.25).repeat(3, 1)
    q = quantize(weight, 4, symmetric, "channel")
    assert torch.equal(q.dequantize(), weight)
    assert torch.allclose(q.scales, torch.full((3, 1), 0.25))
    assert q.codes.dtype == (torch.int8 if symmetric else torch.uint8)


@pytest.mark.parametrize("granularity", ["tensor", "channel", 16])
@pytest.mark.parametrize("symmetric", [True, False])
def test_error_is_within_half_a_step_and_zero_stays_zero(granularity, symmetric):
    torch.manual_seed(0)
    weight = torch.randn(8, 64)
    weight[:, 5] = 0
    q = quantize(weight, 4, symmetric, granularity)
    low, high = code_range(4, symmetric)
    assert low <= q.codes.min() and q.codes.max() <= high
    assert torch.equal(q.zeros, q.zeros.round()) and q.zeros.min() >= low and q.zeros.max() <= high
    step = q.scales.repeat_interleave(q.group_size, dim=1).expand_as(weight)
    assert ((q.dequantize() - weight).abs() <= step / 2 + 1e-6).all()
    assert (q.dequantize()[:, 5] == 0).all()


def test_finer_grids_err_less():
    torch.manual_seed(0)
    weight = torch.randn(16, 128) * torch.logspace(-2, 0, 16)[:, None]  # rows of unequal size
    errors = [quant_error(weight, fake_quantize(weight, 4, False, g)).relative
              for g in ("tensor", "channel", 32)]
    assert errors[0] > 1.5 * errors[1] and errors[1] > 1.1 * errors[2], errors
    assert quant_error(weight, fake_quantize(weight, 8, True, "channel")).relative < 0.01


@pytest.mark.parametrize("bits", [1, 9, 16, 4.0, True])
def test_bad_bits(bits):
    with pytest.raises((ValueError, TypeError), match="bits must be"):
        quantize(torch.randn(4, 8), bits)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize(
    "quantizer",
    [
        lambda w: rtn(w, 4, 32),
        lambda w: quantize(w, 8, symmetric=True, granularity="channel"),
        lambda w: nf4_quantize(w, block_size=64),
        lambda w: fp8_quantize(w, "e4m3"),
        lambda w: format_errors(w),
    ],
    ids=["rtn", "int8 per channel", "nf4", "fp8", "format_errors"],
)
def test_a_non_finite_weight_is_refused_naming_where_it_is(quantizer, bad):
    """Not quietly spread: one NaN used to turn its whole RTN group into NaN, and NF4 mapped it
    to a valid code."""
    weight = torch.randn(4, 64)
    weight[2, 17] = bad
    with pytest.raises(ValueError, match=r"holds 1 NaN or inf value\(s\), the first at index "
                       rf"\(2, 17\) \({bad}\)"):
        quantizer(weight)


@pytest.mark.parametrize("shape", [(0, 64), (4, 0)])
@pytest.mark.parametrize("granularity", ["tensor", "channel", 32])
def test_an_empty_weight_is_refused_not_a_raw_reshape_error(shape, granularity):
    no_values = re.escape(f"the weight to quantize has shape {shape}: no values")
    with pytest.raises(ValueError, match=no_values):
        quantize(torch.zeros(shape), 4, granularity=granularity)


def test_bad_group_size_and_shape():
    with pytest.raises(ValueError, match="group size 48 does not divide the input dimension 64"):
        rtn(torch.randn(4, 64), 4, 48)
    with pytest.raises(ValueError, match="granularity must be"):
        quantize(torch.randn(4, 64), 4, granularity="row")
    with pytest.raises(ValueError, match="2-D weight"):
        quantize(torch.randn(4, 4, 4), 4)
    with pytest.raises(ValueError, match="NF4 block size 48"):
        nf4_quantize(torch.randn(4, 64), 48)
