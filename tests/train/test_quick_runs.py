"""Quick side-by-side runs: alternating rounds, the first step reported on its own, per-variant
tokens per step, an optional validation loss, and their table."""

import pytest
from helpers.tables import table_rows
from helpers.train_fakes import RandomWindows, tiny_gpt2, token_stream

from llmlab.train import TrainConfig
from llmlab.train.quick_runs import (
    QuickRun,
    faster_in_every_round,
    merge_rounds,
    quick_runs,
    round_lines,
    rounds_text,
    runs_table,
)

BASE = TrainConfig(max_steps=3, micro_batch_size=2, seq_len=8, warmup_steps=1, dtype="fp32",
                   eval_interval=10**6, eval_batches=2, device="cpu")


def windows(config: TrainConfig) -> RandomWindows:
    return RandomWindows(token_stream(), config.micro_batch_size, config.seq_len)


def test_rounds_alternate_the_variants():
    order = []

    def data(config):
        order.append(config.micro_batch_size)
        return windows(config)

    variants = {"two rows": dict(micro_batch_size=2), "four rows": dict(micro_batch_size=4)}
    runs = quick_runs(tiny_gpt2, data, BASE, variants, timing_warmup=1, measure_memory=False,
                      rounds=2)
    assert order == [2, 4, 2, 4]  # one training source per run, in turn: A B A B
    for run, rows in zip(runs, (2, 4), strict=True):
        # tokens/s belongs to each variant's own step size (rows x seq_len)
        assert run.tokens_per_s * run.step_ms / 1e3 == pytest.approx(rows * BASE.seq_len)
        assert len(run.losses) == BASE.max_steps  # the first round's losses, one per step
        assert run.first_step_ms > 0 and run.val_loss is None and run.peak_memory_mb is None


def test_validation_loss_and_memory_when_asked():
    (run,) = quick_runs(tiny_gpt2, windows, BASE, {"base": {}}, timing_warmup=1,
                        make_val=windows)
    assert run.val_loss is not None and run.val_loss > 0
    assert run.peak_memory_mb is not None and run.peak_memory_mb > 0
    (row,) = table_rows(runs_table([run]))
    assert row["variant"] == "base" and row["peak MB"] == f"{run.peak_memory_mb:.0f}"


def test_merged_rounds_keep_the_median_step_and_the_tokens_per_step():
    def run(step_ms, loss):
        return QuickRun("a", step_ms, tokens_per_s=1000 / step_ms * 1e3, losses=[loss],
                        peak_memory_mb=None, first_step_ms=9.0)  # 1000 tokens per step

    (merged,) = merge_rounds([[run(10.0, 1.0)], [run(40.0, 2.0)], [run(20.0, 3.0)]])
    assert merged.step_ms == 20.0 and merged.tokens_per_s == pytest.approx(50_000)
    assert merged.losses == [1.0]  # the first round's


@pytest.mark.parametrize("rounds, warmup", [(0, 1), (1, 3)])
def test_bad_settings_are_refused(rounds, warmup):
    with pytest.raises(ValueError, match="rounds|timing_warmup"):
        quick_runs(tiny_gpt2, windows, BASE, {"base": {}}, timing_warmup=warmup, rounds=rounds)


def quick_run(name, step_ms, peak_memory_mb=None):
    return QuickRun(name, step_ms, tokens_per_s=1_000_000 / step_ms, losses=[3.0, 2.34567],
                    peak_memory_mb=peak_memory_mb, first_step_ms=step_ms)


def test_the_table_reads_cell_by_cell():
    runs = [quick_run("base", 8.0, peak_memory_mb=123.4), quick_run("twice as slow", 16.0)]
    assert table_rows(runs_table(runs)) == [
        {"variant": "base", "ms/step": "8.0", "tokens/s": "125,000", "speed": "1.00x",
         "peak MB": "123", "last loss": "2.346"},
        {"variant": "twice as slow", "ms/step": "16.0", "tokens/s": "62,500", "speed": "0.50x",
         "peak MB": "-", "last loss": "2.346"},
    ]
    against_the_slow_one = table_rows(runs_table(runs, baseline="twice as slow"))
    assert [row["speed"] for row in against_the_slow_one] == ["2.00x", "1.00x"]


def test_an_unknown_baseline_names_the_runs():
    runs = [quick_run("bf16", 8.0), quick_run("fp32", 16.0)]
    with pytest.raises(ValueError, match=r"'fp16'.*\['bf16', 'fp32'\]"):
        runs_table(runs, baseline="fp16")
    with pytest.raises(ValueError, match="no runs"):
        runs_table([])


def test_the_rounds_are_shown_and_a_gain_counts_only_beyond_their_spread():
    def run(name, step_ms):
        return QuickRun(name, step_ms, tokens_per_s=1.0, losses=[1.0], peak_memory_mb=None,
                        first_step_ms=1.0)

    apart = [[run("eager", 150), run("compiled", 120)], [run("eager", 160), run("compiled", 130)]]
    assert round_lines(apart).splitlines() == ["   eager: 150, 160 ms/step in the 2 rounds",
                                               "compiled: 120, 130 ms/step in the 2 rounds"]
    assert faster_in_every_round(apart, fast=1, slow=0)
    assert round_lines(apart[:1]).splitlines() == ["   eager: 150 ms/step in its one round",
                                                   "compiled: 120 ms/step in its one round"]
    assert rounds_text(3) == "the 3 rounds"
    overlap = [[run("eager", 154), run("compiled", 180)], [run("eager", 172), run("compiled", 135)]]
    # the medians differ (163 against 157.5), the rounds do not say which is faster
    assert not faster_in_every_round(overlap, fast=1, slow=0)
    assert not faster_in_every_round(apart, fast=0, slow=1)
