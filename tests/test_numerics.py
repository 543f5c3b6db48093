"""The course's one relative error."""

import pytest
import torch

from llmlab.numerics import accumulate, flushed_accumulate, relative_error


def test_the_same_numbers_are_zero_apart_and_a_scaled_copy_its_scale():
    expected = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    assert relative_error(expected.clone(), expected) == 0
    # 1.01 * x is rounded to float32, entry by entry: 0.01 to about 6 digits
    assert relative_error(1.01 * expected, expected) == pytest.approx(0.01, rel=1e-5)


def test_it_is_the_frobenius_ratio_not_the_largest_entry():
    expected = torch.ones(100)
    got = expected.clone()
    got[0] += 1  # one entry off by 1: max-abs ratio 1, Frobenius ratio 1/10
    assert relative_error(got, expected) == pytest.approx(0.1)


def test_half_precision_is_compared_in_float64():
    expected = torch.full((4096,), 1000.0, dtype=torch.float16)
    got = expected + 1  # in fp16 the difference's square overflows: 1000^2 * 4096 > 65504
    assert relative_error(got, expected) == pytest.approx(1e-3)


def test_against_zeros_it_is_the_absolute_error_and_shapes_must_match():
    assert relative_error(torch.full((4,), 0.5), torch.zeros(4)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shapes differ"):
        relative_error(torch.zeros(3), torch.zeros(4))


# ---------------------------------------------------------------- accumulators (Lab 09)


def test_a_bf16_accumulator_stops_growing_where_one_is_below_half_its_spacing():
    # bf16 keeps 8 significant bits: from 256 on the spacing is 2, and 256 + 1 rounds back to 256
    assert accumulate(torch.ones(10_000), torch.bfloat16).item() == 256
    assert accumulate(torch.ones(10_000), torch.float16).item() == 2048  # 11 bits
    assert accumulate(torch.ones(10_000), torch.float32).item() == 10_000


def test_accumulate_sums_the_last_dimension_and_rounds_after_every_add():
    values = torch.tensor([[1.0, 2.0**-9, 2.0**-9, 2.0**-9, 2.0**-9], [3.0, -1.0, 0.5, 0.0, 0.0]])
    got = accumulate(values, torch.bfloat16)
    assert got.dtype == torch.float32 and got.shape == (2,)
    # 1 + 2^-9 is a tie that rounds to even (1) each time; one rounding at the end gives 1 + 2^-7
    assert got.tolist() == [1.0, 2.5]
    assert values.sum(-1).tolist() == [1.0 + 2.0**-7, 2.5]


def test_accumulate_rejects_what_it_cannot_sum():
    with pytest.raises(ValueError, match="floating-point"):
        accumulate(torch.ones(3, dtype=torch.int64), torch.bfloat16)
    with pytest.raises(ValueError, match="last dimension"):
        accumulate(torch.tensor(1.0), torch.bfloat16)


def test_a_flushed_accumulator_errs_like_one_block_whatever_the_length():
    values = torch.rand(8, 4096, generator=torch.Generator().manual_seed(0))
    exact = values.double().sum(-1)
    narrow = relative_error(accumulate(values, torch.bfloat16), exact)
    flushed = relative_error(flushed_accumulate(values, torch.bfloat16, 128), exact)
    assert narrow > 0.1  # the running sum passes 256 early: later terms of ~0.5 round away
    assert flushed < 0.01 < narrow
    # a block of one term rounds only the terms; a block of everything is accumulate
    torch.testing.assert_close(flushed_accumulate(values, torch.bfloat16, 1),
                               values.bfloat16().float().sum(-1))
    assert torch.equal(flushed_accumulate(values, torch.bfloat16, 4096),
                       accumulate(values, torch.bfloat16))
    with pytest.raises(ValueError, match="block must be"):
        flushed_accumulate(values, torch.bfloat16, 0)
