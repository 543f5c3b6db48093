"""fp8 e4m3/e5m2 round trips: values on the fp8 grid survive, the scale puts the absmax on the
format's max, e4m3 is measured more precise and e5m2 measured to reach further, and the
comparison with int8/int4 on the same weight."""

import re

import pytest
import torch

from llmlab.quant.fp8 import (
    format_errors,
    fp8_dtype,
    fp8_fake_quantize,
    fp8_formats_table,
    fp8_quantize,
)


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
@pytest.mark.parametrize("granularity", ["tensor", "channel"])
def test_values_on_the_fp8_grid_survive(name, granularity):
    dtype = fp8_dtype(name)
    # every finite fp8 value, one row each with its max: times a power of two the scale is exact
    grid = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    grid = grid[torch.isfinite(grid)]
    weight = torch.stack([grid, -grid]) * 2.0**-10
    torch.testing.assert_close(fp8_fake_quantize(weight, name, granularity), weight, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_the_scale_maps_the_absmax_to_the_formats_max(name):
    weight = torch.randn(8, 64) * torch.logspace(-3, 1, 8)[:, None]  # rows of different sizes
    finfo_max = torch.finfo(fp8_dtype(name)).max
    q = fp8_quantize(weight, name, "tensor")
    assert q.values.float().abs().max() == finfo_max
    assert q.scale.shape == ()
    per_row = fp8_quantize(weight, name, "channel")
    assert torch.equal(per_row.values.float().abs().amax(-1), torch.full((8,), finfo_max))
    assert per_row.scale.shape == (8, 1)


def test_e4m3_is_more_precise_on_weights():
    weight = torch.randn(128, 256) * 0.02
    errors = format_errors(weight)
    assert errors["fp8 e4m3"].relative < 0.7 * errors["fp8 e5m2"].relative  # measured: 0.5x
    assert errors["int8"].relative < errors["fp8 e4m3"].relative < errors["int4"].relative


def test_e5m2_reaches_smaller_values_after_the_same_scale():
    # magnitudes over 12 decades: after scaling the max to the format's max, e4m3 flushes the
    # small ones to zero, e5m2 (5 exponent bits) still holds them
    values = torch.logspace(-12, 0, 241)
    lost = {name: int((fp8_fake_quantize(values, name) == 0).sum()) for name in ("e4m3", "e5m2")}
    assert lost["e5m2"] < lost["e4m3"], lost


def test_the_table_reads_torch_finfo():
    rows = {row["format"]: row for row in fp8_formats_table()}
    assert rows["e4m3"]["max"] == 448 and rows["e5m2"]["max"] == 57344
    assert rows["e4m3"]["mantissa bits"] == 3 and rows["e5m2"]["mantissa bits"] == 2
    assert rows["e5m2"]["smallest normal"] < rows["e4m3"]["smallest normal"]


def test_all_zero_rows_stay_zero():
    weight = torch.zeros(2, 8)
    weight[0, 3] = 1.0
    assert torch.equal(fp8_fake_quantize(weight, "e4m3", "channel"), weight)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"name": "e3m4"}, "unknown fp8 format"), ({"granularity": 32}, "granularity")],
)
def test_bad_input_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fp8_quantize(torch.ones(2, 4), **kwargs)


@pytest.mark.parametrize("shape", [(0, 64), (4, 0)])
@pytest.mark.parametrize("granularity", ["tensor", "channel"])
def test_an_empty_tensor_is_refused_not_a_raw_reduction_error(shape, granularity):
    empty = torch.zeros(shape)
    no_values = re.escape(f"has shape {shape}: no values")
    with pytest.raises(ValueError, match=f"the tensor to quantize {no_values}"):
        fp8_quantize(empty, granularity=granularity)
    with pytest.raises(ValueError, match=no_values):
        format_errors(empty, granularity)
