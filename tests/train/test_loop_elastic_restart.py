"""torchrun's elastic agent restarts a 2-process run after one worker is SIGKILLed, and the trainer
resumes from the newest verified checkpoint exactly: every loss logged after the restart and the
final weights equal those of a run that was never interrupted, bit for bit (CPU, gloo).

Invariants: the restarted group continues from the last checkpoint that verifies (step 4), never
from a half-written one; each rank gets back its own data position and RNG state (rank 1 draws other
windows, and its own dropout masks), so a resume that mixed them up changes the losses; a kill
before the first checkpoint restarts the run from step 1, not refused as an earlier run's folder.
"""

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from helpers import WORKERS
from helpers.launch import LAUNCHER_NAMES, run
from helpers.train_fakes import ddp_resume_run
from safetensors.torch import load_file

from llmlab.distributed import launch
from llmlab.train import read_metrics

WORKER = WORKERS / "elastic_worker.py"
SLOW = pytest.mark.slow  # each run: a torchrun of 2 workers, 15-40 s on 2 busy cores


def elastic_run(out_dir: Path, **kill: int) -> str:
    """`torchrun --standalone --nproc_per_node 2 --max-restarts 1 elastic_worker.py out_dir`, with
    the worker's KILL_* variables (see elastic_worker.py); its output, once it has succeeded."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", "--max-restarts", "1", "--monitor-interval", "0.1",
               str(WORKER), str(out_dir)]
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_NAMES}
    env.update(OMP_NUM_THREADS="1", **{k: str(v) for k, v in kill.items()})
    return run(command, env, timeout_s=300)  # past the time, the whole torchrun tree is killed


def losses_by_step(out_dir: Path) -> list[tuple[int, float]]:
    """The run's losses as they stand (llmlab.train.read_metrics)."""
    return [(row["step"], row["loss"]) for row in read_metrics(out_dir)]


def logged(out_dir: Path) -> list[int | str]:
    """Every record of metrics.jsonl: a step's number, or "restart N" (goes on after step N)."""
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").open()]
    return [f"restart {r['step']}" if r.get("event") else r["step"] for r in records]


def final_weights(out_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(out_dir / "checkpoints" / "step_0000008" / "model.safetensors")


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """The reference: the same run, never interrupted. Its ranks are forked (launch), not started
    by torchrun: the same sums on two ranks, without two more interpreters importing torch."""
    out_dir = tmp_path_factory.mktemp("straight")
    launch(ddp_resume_run, 2, args=(str(out_dir),))
    return out_dir


def assert_same_run(out_dir: Path, reference: Path, logged_before_kill: int, resumed: int) -> None:
    expected = losses_by_step(reference)
    assert [step for step, _ in expected] == list(range(1, 9))
    # The first attempt logged steps 1..logged_before_kill, the restarted one the steps after
    # `resumed` (appended after a restart record).
    first, second = range(1, logged_before_kill + 1), range(resumed + 1, 9)
    assert logged(out_dir) == [*first, f"restart {resumed}", *second]
    assert losses_by_step(out_dir) == expected
    weights, reference_weights = final_weights(out_dir), final_weights(reference)
    assert weights.keys() == reference_weights.keys()
    assert all(torch.equal(weights[name], reference_weights[name]) for name in weights)


@SLOW
@pytest.mark.parametrize(
    ("kill_after", "resumed", "says"),
    [(6, 4, "resumed from step 4"), (2, 0, "starting at step 1")],
    ids=["after-a-checkpoint", "before-the-first-checkpoint"],
)
def test_a_killed_worker_is_restarted_and_resumes_bit_for_bit(
    straight, tmp_path, kill_after, resumed, says
):
    # Rank 1 (not the one that writes checkpoints) dies after step `kill_after`. The run goes on
    # from the newest checkpoint (step 4), or from step 1 where there is none yet: a folder with
    # nothing to lose is not refused as an earlier run's.
    output = elastic_run(tmp_path, KILL_RANK=1, KILL_AFTER_STEP=kill_after)
    assert "rank 1: SIGKILL" in output
    assert says in output
    assert_same_run(tmp_path, straight, logged_before_kill=kill_after, resumed=resumed)


@SLOW
def test_a_kill_inside_a_save_leaves_that_checkpoint_unused(straight, tmp_path):
    # Rank 0 dies while writing checkpoint 8: the restart must resume from 4, not the torn 8.
    output = elastic_run(tmp_path, KILL_RANK=0, KILL_IN_SAVE=8)
    assert "rank 0: SIGKILL" in output
    assert "left by an interrupted save" in output  # the torn temporary folder was swept
    assert "resumed from step 4" in output
    assert_same_run(tmp_path, straight, logged_before_kill=8, resumed=4)
