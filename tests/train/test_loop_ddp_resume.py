"""A 2-process DDP run (gloo, CPU) killed mid-run and resumed trains exactly like one that was
never interrupted: every rank gets back its own data position and RNG state.

Invariant: rank 1 draws other windows than rank 0 (its own seed) and its dropout masks come from
its own RNG; a resume that gave it rank 0's states would change the losses from the first resumed
step on, and the final weights.

The ranks are forked by launch(): torchrun's own kills and restarts of this run are
test_loop_elastic_restart.py's, and `llmlab train`'s second call under torchrun is
test_cli_train.py's.
"""

import json
from pathlib import Path

import pytest
import torch
from helpers.train_fakes import RandomWindows, ddp_resume_run, tiny_gpt2, token_stream
from safetensors.torch import load_file

from llmlab.distributed import LaunchError, launch
from llmlab.train import CheckpointMismatch, TrainConfig, Trainer, read_metrics


def losses_by_step(out_dir: Path) -> list[tuple[int, float]]:
    """The run's losses as they stand (llmlab.train.read_metrics)."""
    return [(row["step"], row["loss"]) for row in read_metrics(out_dir)]


def final_weights(out_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(out_dir / "checkpoints" / "step_0000008" / "model.safetensors")


def test_a_killed_two_process_run_resumes_bit_for_bit(tmp_path, capsys):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    launch(ddp_resume_run, 2, args=(str(straight),))

    # Rank 0 dies after step 7, with step 4 saved.
    with pytest.raises(LaunchError, match="rank 0 was killed by signal SIGKILL"):
        launch(ddp_resume_run, 2, args=(str(killed), 7))
    capsys.readouterr()
    launch(ddp_resume_run, 2, args=(str(killed),))
    assert "resumed from step 4" in capsys.readouterr().out

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
