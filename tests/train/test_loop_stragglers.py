"""Per-rank readings in a real 3-process DDP run (gloo): every rank's data time and memory reach
rank 0's metrics.jsonl, and a rank slowed on purpose in its data path is the one flagged. The
trainer reads a fake clock, so the times are exact on any machine, however busy."""

import json
from types import SimpleNamespace

import pytest
import torch.distributed as dist
from helpers.fake_clock import ManualClock
from helpers.train_fakes import FixedRows, global_rows, tiny_gpt2

from llmlab.distributed import launch
from llmlab.train import TrainConfig, Trainer, loop
from llmlab.train.metrics import RANK_READINGS

NPROCS, STEPS, SLEEP_S = 3, 4, 0.4


class SlowRows(FixedRows):
    """FixedRows whose every fetch takes `sleep_s` more on `clock`: a slow disk or data loader on
    one host."""

    def __init__(self, *args, clock: ManualClock, sleep_s: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.clock, self.sleep_s = clock, sleep_s

    def next_batch(self):
        self.clock.sleep(self.sleep_s)
        return super().next_batch()


def train_rank(out_dir: str, slow_rank: int | None, parallel: str = "ddp") -> None:
    rank = dist.get_rank()
    # Each reading of the trainer's clock moves it 1 ms on. This rank is a forked process: the
    # patch goes with it.
    clock = ManualClock(tick=0.001)
    loop.time = SimpleNamespace(perf_counter=clock)
    sleep_s = SLEEP_S if rank == slow_rank else 0.0
    source = SlowRows(global_rows(12), 4, rank=rank, world_size=NPROCS, clock=clock,
                      sleep_s=sleep_s)
    # 1.0: flag a rank that made the step twice as long as the others' pace. Every 2nd step is
    # logged: not the first, whose one-off costs would dilute a slowdown on a real clock.
    config = TrainConfig(max_steps=STEPS, micro_batch_size=4, seq_len=16, dtype="fp32",
                         device="cpu", warmup_steps=1, log_interval=2, eval_interval=100,
                         progress=False, out_dir=out_dir, straggler_threshold=1.0,
                         parallel=parallel)
    Trainer(tiny_gpt2(), config, source).fit()


def logged_rows(out_dir) -> list[dict]:
    lines = (out_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize(
    "parallel", ["ddp", *(pytest.param(p, marks=pytest.mark.slow) for p in ("zero1", "fsdp"))]
)
def test_a_rank_slowed_in_its_data_path_is_flagged_at_every_logged_step(tmp_path, parallel):
    launch(train_rank, NPROCS, args=(str(tmp_path), 1, parallel), timeout_s=120)
    rows = logged_rows(tmp_path)
    assert [row["stragglers"] for row in rows] == [[1]] * (STEPS // 2)
    for row in rows:
        assert set(row["ranks"]) == set(RANK_READINGS)
        assert all(len(values) == NPROCS for values in row["ranks"].values())
        fast, slow = row["ranks"]["data_seconds"][0], row["ranks"]["data_seconds"][1]
        assert slow >= SLEEP_S > 10 * fast
        assert all(gb > 0 for gb in row["ranks"]["memory_gb"])
        assert row["ranks"]["gpu_util"] == [None] * NPROCS  # no GPU here: known to be unknown
    header, first = (tmp_path / "metrics.csv").read_text().splitlines()[:2]
    assert "ranks" in header.split(",") and '""data_seconds"": [' in first  # JSON in the cell


def test_the_same_run_without_slowing_flags_nobody(tmp_path):
    launch(train_rank, NPROCS, args=(str(tmp_path), None), timeout_s=120)
    rows = logged_rows(tmp_path)
    assert [row["stragglers"] for row in rows] == [[]] * (STEPS // 2)
    assert all(len(row["ranks"]["data_seconds"]) == NPROCS for row in rows)
