"""Quick side-by-side runs: alternating rounds, the first step reported on its own, per-variant
tokens per step, and an optional validation loss."""

import pytest
from train_fakes import RandomWindows, tiny_gpt2, token_stream

from llmlab.train import TrainConfig
from llmlab.train.compare import quick_runs, runs_table

BASE = TrainConfig(max_steps=3, micro_batch_size=2, seq_len=8, warmup_steps=1, dtype="fp32",
                   eval_interval=10**6, eval_batches=2, device="cpu")  # fmt: skip


def windows(config: TrainConfig) -> RandomWindows:
    return RandomWindows(token_stream(), config.micro_batch_size, config.seq_len)


def test_rounds_alternate_the_variants_and_pool_their_steps():
    order = []

    def data(config):
        order.append(config.micro_batch_size)
        return windows(config)

    variants = {"two rows": dict(micro_batch_size=2), "four rows": dict(micro_batch_size=4)}
    runs = quick_runs(tiny_gpt2, data, BASE, variants, timing_warmup=1, measure_memory=False,
                      rounds=2)  # fmt: skip
    assert order == [2, 4, 2, 4]  # one training source per run, in turn: A B A B
    for run, rows in zip(runs, (2, 4), strict=True):
        # tokens/s belongs to each variant's own step size (rows x seq_len)
        assert run.tokens_per_s * run.step_ms / 1e3 == pytest.approx(rows * BASE.seq_len)
        assert len(run.losses) == BASE.max_steps  # the first round's losses, one per step
        assert run.first_step_ms > 0 and run.val_loss is None and run.peak_memory_mb is None


def test_validation_loss_and_memory_when_asked():
    (run,) = quick_runs(tiny_gpt2, windows, BASE, {"base": {}}, timing_warmup=1,
                        make_val=windows)  # fmt: skip
    assert run.val_loss is not None and run.val_loss > 0
    assert run.peak_memory_mb is not None and run.peak_memory_mb > 0
    assert "base" in runs_table([run])


@pytest.mark.parametrize("rounds, warmup", [(0, 1), (1, 3)])
def test_bad_settings_are_refused(rounds, warmup):
    with pytest.raises(ValueError, match="rounds|timing_warmup"):
        quick_runs(tiny_gpt2, windows, BASE, {"base": {}}, timing_warmup=warmup, rounds=rounds)
