"""A 2-process torchrun run (gloo, CPU) killed mid-run and resumed trains exactly like one that was
never interrupted: every rank gets back its own data position and RNG state.

Invariant: rank 1 draws other windows than rank 0 (its own seed) and its dropout masks come from
its own RNG; a resume that gave it rank 0's states would change the losses from the first resumed
step on, and the final weights.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import WORKERS
from helpers.train_fakes import RandomWindows, tiny_gpt2, token_stream
from safetensors.torch import load_file

from llmlab.train import CheckpointMismatch, TrainConfig, Trainer, read_metrics

WORKER = WORKERS / "ddp_resume_worker.py"


def torchrun_worker(out_dir: Path, kill_at: int = 0) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               str(WORKER), str(out_dir), str(kill_at)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def losses_by_step(out_dir: Path) -> list[tuple[int, float]]:
    """The run's losses as they stand (llmlab.train.read_metrics)."""
    return [(row["step"], row["loss"]) for row in read_metrics(out_dir)]


def final_weights(out_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(out_dir / "checkpoints" / "step_0000008" / "model.safetensors")


def test_a_killed_two_process_run_resumes_bit_for_bit(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = torchrun_worker(straight)
    assert done.returncode == 0, done.stderr[-3000:]

    crash = torchrun_worker(killed, kill_at=7)  # rank 0 dies after step 7: step 4 is saved
    assert crash.returncode != 0
    resumed = torchrun_worker(killed)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step 4" in resumed.stdout

    expected = losses_by_step(straight)
    assert [step for step, _ in expected] == list(range(1, 9))
    # The killed run logged steps 1-7, the resumed one 5-8 after a restart record (appended).
    records = [json.loads(line) for line in (killed / "metrics.jsonl").open()]
    assert [(r["step"], r.get("event")) for r in records] == (
        [(step, None) for step in range(1, 8)] + [(4, "restart")]
        + [(step, None) for step in range(5, 9)]
    )
    assert losses_by_step(killed) == expected  # every step exactly
    weights, reference = final_weights(killed), final_weights(straight)
    assert weights.keys() == reference.keys()
    assert all(torch.equal(weights[name], reference[name]) for name in reference)

    # One process cannot take over the two ranks' data positions: refused, not guessed.
    config = TrainConfig(max_steps=9, micro_batch_size=4, seq_len=16, dtype="fp32", device="cpu",
                         out_dir=killed, progress=False)
    alone = Trainer(tiny_gpt2(dropout=0.1), config, RandomWindows(token_stream(), 4))
    with pytest.raises(CheckpointMismatch, match=r"saved by 2 process\(es\) and this run has 1"):
        alone.fit(resume=True)
