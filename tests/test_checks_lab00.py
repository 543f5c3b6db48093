"""Lab 00's checks reject likely mistakes, each with a message that points at the mistake.
(tests/test_checks.py proves they pass on the solution and fail on the stub.)"""

import pytest

from llmlab import bench
from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab00 as check


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda m, n, k, s: m * n * k / s / 1e12, "multiply-add is 2 FLOPs"),
        (lambda m, n, k, s: 2 * m * n * k / s / 1e9, "1e12"),
        (lambda m, n, k, s: 2 * m * n * k * s / 1e12, "expected about"),
    ],
)
def test_achieved_tflops_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_achieved_tflops(wrong)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda cap: "bf16" if cap[0] >= 7 else "fp32", "no bf16"),  # bf16 on Volta/Turing
        (lambda cap: "fp16" if cap >= (7, 0) else "fp32", "Ampere"),  # never bf16
        (lambda cap: "bf16" if cap > (8, 0) else "fp16", "tensor cores"),  # boundary wrong
    ],
)
def test_training_dtype_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_training_dtype(wrong)


def test_training_dtype_accepts_torch_dtypes_too(capsys):
    import torch

    def as_dtype(cap):
        if cap >= (8, 0):
            return torch.bfloat16
        return torch.float16 if cap >= (7, 0) else torch.float32

    check.exercise_training_dtype(as_dtype)
    assert "PASSED" in capsys.readouterr().out


def _seconds(m, n, k, gpu, dtype, efficiency, scale=1.0, use_efficiency=True):
    peak = bench.peak_tflops(gpu, dtype)
    if peak is None:
        return None
    return scale * 2 * m * n * k / (peak * 1e12 * (efficiency if use_efficiency else 1))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda *a: _seconds(*a, use_efficiency=False), "Include the efficiency"),
        (lambda *a: _seconds(*a, scale=0.5), "multiply-add is 2 FLOPs"),
        (lambda *a: _seconds(*a) or 0.0, "estimate must be None"),  # invents a number for T4 bf16
    ],
)
def test_matmul_seconds_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_matmul_seconds(wrong)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda m, n, k, b: 2 * m * n * k / (b * (m * k + k * n)), "result matrix C"),
        (lambda m, n, k, b: 2 * m * n * k / (m * k + k * n + m * n), "Count bytes"),
        (lambda m, n, k, b: m * n * k / (b * (m * k + k * n + m * n)), "2 FLOPs"),
    ],
)
def test_arithmetic_intensity_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_arithmetic_intensity(wrong)
