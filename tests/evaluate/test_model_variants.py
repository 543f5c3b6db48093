"""Comparing variants: ten variants in one table, and a masked model must be made permanent
first."""

import pytest
from helpers.evaluation import TINY

from llmlab.evaluate import (
    check_plain,
    compare_variants,
    comparison_table,
    score_tokens,
    size_on_disk,
)
from llmlab.models import build_model
from llmlab.prune import apply_masks, global_masks, make_permanent


def test_ten_variants_compare_in_one_table(uneven_windows):
    # How long it takes is for benchmarks/ to measure: a bound here would fail on a busy machine.
    variants = {f"seed {seed}": build_model(TINY, seed=seed) for seed in range(10)}
    rows = compare_variants(variants, uneven_windows, repeats=3)
    assert [row.variant for row in rows] == list(variants)
    parameters = sum(p.numel() for p in variants["seed 0"].parameters())
    assert rows[0].parameters == parameters
    assert rows[0].perplexity == pytest.approx(score_tokens(variants["seed 0"],
                                                            uneven_windows).perplexity)
    # float32 weights: 4 bytes each, plus a small safetensors header.
    assert 4 * parameters <= size_on_disk(variants["seed 0"]) < 4 * parameters + 20_000
    header = comparison_table(rows).splitlines()[0]
    assert header == "variant | perplexity | accuracy | parameters | nonzero | size_mb | latency_ms"


def test_a_masked_model_must_be_made_permanent_before_comparing(uneven_windows):
    model = build_model(TINY)
    apply_masks(model, global_masks(model, 0.5))
    with pytest.raises(ValueError, match="make_permanent"):
        check_plain(model)
    row = compare_variants({"pruned": make_permanent(model)}, uneven_windows, repeats=1)[0]
    assert row.parameters - row.nonzero >= 0.5 * sum(
        p.numel() for n, p in model.named_parameters() if ".h." in n and n.endswith(".weight")
        and p.dim() == 2)
