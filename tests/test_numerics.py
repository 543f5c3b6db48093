"""The course's one relative error."""

import pytest
import torch

from llmlab.numerics import relative_error


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
