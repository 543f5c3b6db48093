"""A dry run of a 7B step on fake tensors matches the estimate."""

import pytest
from helpers.memory_items import activations

from llmlab import memory
from llmlab.memory import TrainingSetup, estimate_memory


def test_dry_run_of_a_7b_step_matches_the_estimate():
    """Pure bf16 AdamW, one sequence of 2048 tokens: weights 2 + gradients 2 + moments 4 +
    foreach scratch 2 = 10 bytes per parameter at the optimizer step, 67.4 GB."""
    setup = TrainingSetup(batch=1, seq=2048, dtype="bf16", master_weights=False)
    measured = memory.dry_run("llama-7b", setup)
    predicted = estimate_memory("llama-7b", setup)
    assert measured.peak_bytes == pytest.approx(predicted.peak, rel=0.01)
    assert measured.peak_bytes / 1e9 == pytest.approx(67.38, abs=0.01)
    assert measured.activations == pytest.approx(activations(predicted), rel=0.01)
