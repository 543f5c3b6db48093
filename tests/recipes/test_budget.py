"""How long a run is: steps from whole passes' tokens, minutes at the measured rate."""

import pytest

from llmlab.gpu_specs import peak_tflops
from llmlab.recipes.budget import training_budget


def test_the_budget_arithmetic():
    """Steps are whole passes' tokens over tokens per step, rounded down once (30,000 tokens x 2
    passes = 3 steps of 16,384; rounding each pass first gives 2); minutes are those steps'
    tokens at the 28% of an H200's bf16 peak measured there. Fails on a wrong MFU, peak or
    rounding, or on minutes counted from the data's tokens instead of the steps'."""
    flops = 0.28 * peak_tflops("H200", "bf16") * 1e12 / 500_000  # 500k tokens/s
    budget = training_budget(30_000, 2, 16_384, flops)
    assert (budget.steps, budget.tokens) == (3, 3 * 16_384)
    assert budget.tokens_per_s == pytest.approx(500_000)
    assert budget.minutes == pytest.approx(3 * 16_384 / 500_000 / 60)
    line = str(training_budget(100_000_000, 1, 16_384, flops))
    assert line.startswith("6,103 steps, 100.0M tokens: about 3.3 minutes on one H200")
    assert "~500,000 tokens/s (28% MFU, as measured there)" in line and "gpu-check" in line
