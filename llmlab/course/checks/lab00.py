"""Checks for Lab 00 (environment and GPU check)."""

from llmlab.bench import matmul_flops, peak_tflops
from llmlab.course.checks import ExerciseFailed, call, exercise, expect_number, passed
from llmlab.device import training_dtype_for

UNIT_MISTAKES = (
    (0.5, "A multiply-add is 2 FLOPs: an m x k by k x n matmul does 2*m*n*k."),
    (1e3, "Units: 1 TFLOP/s is 1e12 FLOP/s (you may have divided by 1e9)."),
    (1e-3, "Units: 1 TFLOP/s is 1e12 FLOP/s (you may have divided by 1e15)."),
)


@exercise()
def exercise_achieved_tflops(achieved_tflops) -> None:
    """Exercise 1: achieved_tflops(m, n, k, seconds) -> TFLOP/s of one m x k @ k x n matmul."""
    name = "Exercise 1 (achieved TFLOP/s)"
    for m, n, k, seconds in [(4096, 4096, 4096, 1.5e-3), (1024, 2048, 512, 2e-4), (8, 16, 32, 1.0)]:
        got = call(name, achieved_tflops, m, n, k, seconds)
        expected = matmul_flops(m, n, k) / seconds / 1e12
        text = f"achieved_tflops({m}, {n}, {k}, {seconds})"
        expect_number(name, text, got, expected, mistakes=UNIT_MISTAKES)
    passed(name, "a 4096^3 matmul in 1.5 ms is 91.6 TFLOP/s")


DTYPE_ALIASES = {
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
}  # fmt: skip

WHY_DTYPE = {
    "bf16": "capability 8.0+ (Ampere and newer) has bf16 tensor cores: fp32's range, fp16's speed",
    "fp16": "capability 7.x (Volta, Turing) has fp16 tensor cores but no bf16; use a grad scaler",
    "fp32": "below 7.0 there are no tensor cores, so half precision saves memory but not time",
}


@exercise()
def exercise_training_dtype(training_dtype) -> None:
    """Exercise 2: training_dtype((major, minor)) -> "bf16" | "fp16" | "fp32" for a CUDA GPU."""
    name = "Exercise 2 (training dtype)"
    for capability in [(6, 0), (6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (12, 0)]:
        got = call(name, training_dtype, capability)
        expected = training_dtype_for("cuda", capability).name
        if DTYPE_ALIASES.get(str(got).lower()) != expected:
            raise ExerciseFailed(
                f"{name}: training_dtype({capability}) returned {got!r}, expected {expected!r}: "
                f"{WHY_DTYPE[expected]}."
            )
    passed(name, "bf16 from Ampere (8.0) on, fp16 with a scaler on Volta/Turing, else fp32")


@exercise()
def exercise_matmul_seconds(estimate_matmul_seconds) -> None:
    """Exercise 3: estimate_matmul_seconds(m, n, k, gpu, dtype, efficiency) from the peak table."""
    name = "Exercise 3 (matmul time from the peak)"
    cases = [
        (8192, 8192, 8192, "NVIDIA H100 80GB HBM3", "bf16", 0.7),
        (4096, 4096, 4096, "NVIDIA A100-SXM4-80GB", "fp32", 0.9),
        (16384, 4096, 1024, "Tesla T4", "fp16", 0.5),
    ]
    for m, n, k, gpu, dtype, efficiency in cases:
        got = call(name, estimate_matmul_seconds, m, n, k, gpu, dtype, efficiency)
        expected = matmul_flops(m, n, k) / (peak_tflops(gpu, dtype) * 1e12 * efficiency)
        text = f"estimate_matmul_seconds({m}, {n}, {k}, {gpu!r}, {dtype!r}, {efficiency})"
        mistakes = (
            *UNIT_MISTAKES,
            (efficiency, "Include the efficiency: real matmuls reach only part of the peak."),
            (efficiency**2, "Efficiency below 1 makes the matmul slower: divide by it."),
        )
        expect_number(name, text, got, expected, mistakes=mistakes)
    got = call(name, estimate_matmul_seconds, 4096, 4096, 4096, "Tesla T4", "bf16", 0.7)
    if got is not None:
        raise ExerciseFailed(
            f"{name}: a T4 has no bf16 math, so peak_tflops('Tesla T4', 'bf16') is None and the "
            f"estimate must be None too (an unknown peak gives no estimate), not {got!r}."
        )
    passed(name, "an 8192^3 bf16 matmul takes about 1.6 ms on an H100 SXM at 70% of peak")


@exercise()
def exercise_arithmetic_intensity(arithmetic_intensity) -> None:
    """Exercise 4: FLOPs per byte moved for a matmul that reads A and B and writes C once."""
    name = "Exercise 4 (arithmetic intensity)"
    for m, n, k, nbytes in [(4096, 4096, 4096, 2), (1, 4096, 4096, 2), (512, 1024, 64, 4)]:
        got = call(name, arithmetic_intensity, m, n, k, nbytes)
        moved = nbytes * (m * k + k * n + m * n)
        expected = matmul_flops(m, n, k) / moved
        only_inputs = matmul_flops(m, n, k) / (nbytes * (m * k + k * n))
        mistakes = [
            (0.5, "A multiply-add is 2 FLOPs."),
            (only_inputs / expected, "The result matrix C (m x n) is written to memory too."),
            (float(nbytes), "Count bytes, not elements: multiply by bytes_per_element."),
        ]
        text = f"arithmetic_intensity({m}, {n}, {k}, {nbytes})"
        expect_number(name, text, got, expected, mistakes=mistakes)
    passed(name, "a 4096^3 bf16 matmul does about 1365 FLOPs per byte; a matrix-vector product ~1")


NOTEBOOK = "00_environment.ipynb"
# The function each exercise asks for -> its check (tests/test_checks.py runs them all).
EXERCISES = {
    "achieved_tflops": exercise_achieved_tflops,
    "training_dtype": exercise_training_dtype,
    "estimate_matmul_seconds": exercise_matmul_seconds,
    "arithmetic_intensity": exercise_arithmetic_intensity,
}
