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


def test_latencies_are_timed_in_turns_so_a_slow_spell_slows_every_variant_alike(monkeypatch):
    """A fake timer: the first three timings fall in a slow spell of the machine (10 s), the rest
    take 1 s. Timed in turns, neither variant's median sees it; timed one variant after the
    other, the first would be the slow one."""
    from types import SimpleNamespace

    import torch

    from llmlab.evaluate import model_variants

    timed = []

    def fake_time_fn(fn, *, warmup, repeats, device):
        fn()
        timed.append(warmup)
        return SimpleNamespace(median_s=10.0 if len(timed) <= 3 else 1.0)

    monkeypatch.setattr(model_variants, "time_fn", fake_time_fn)
    models = {"dense": build_model(TINY, seed=0), "zeros": build_model(TINY, seed=1)}
    models["dense"].eval()  # built in training mode, as "zeros" stays
    ids = torch.zeros(1, 8, dtype=torch.long)
    latencies = model_variants.interleaved_latency_seconds(models, ids, repeats=5)
    assert latencies == {"dense": 1.0, "zeros": 1.0}
    assert timed == [1, 1] + [0] * 8  # one warm-up per variant, in the first turn only
    assert models["zeros"].training and not models["dense"].training  # modes come back
