"""The trainer's `parallel` strategies on 2 gloo ranks: ZeRO-1 (with AdamW, or Muon sharded by
whole matrices) and FSDP2 train like one process on the same global batch, and a stopped run
resumes from its checkpoint (FSDP's shards through DCP)."""

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from helpers.train_fakes import FixedRows, global_rows, tiny_gpt2

from llmlab.cli import main
from llmlab.distributed import launch
from llmlab.train import TrainConfig, Trainer
from llmlab.train.checkpoint import (
    CheckpointCorrupt,
    CheckpointMismatch,
    is_sharded,
    newest_verified_checkpoint,
    verify_checkpoint,
)

STEPS = 4


def settings(micro: int, accum: int = 1, **changes) -> TrainConfig:
    base = dict(max_steps=STEPS, micro_batch_size=micro, seq_len=16, grad_accum_steps=accum,
                dtype="fp32", device="cpu", warmup_steps=1, lr=3e-3, log_interval=1,
                eval_interval=100, progress=False)
    return TrainConfig(**{**base, **changes})


def states_here(optimizer) -> int:
    """How many parameters have optimizer states on this rank (ZeroRedundancyOptimizer keeps its
    rank's share in its local `.optim`)."""
    return len(getattr(optimizer, "optim", optimizer).state)


def train_losses(parallel: str, micro: int, accum: int, optimizer: str) -> tuple[list, int]:
    rank, world = dist.get_rank(), dist.get_world_size()
    source = FixedRows(global_rows(8), micro, rank=rank, world_size=world)
    config = settings(micro, accum, parallel=parallel, optimizer=optimizer)
    trainer = Trainer(tiny_gpt2(), config, source)
    return [m.loss for m in trainer.fit().history], states_here(trainer.optimizer)


@pytest.mark.slow
@pytest.mark.parametrize(("parallel", "optimizer"),
                         [("zero1", "adamw"), ("zero1", "muon"), ("fsdp", "adamw")])
def test_sharded_strategies_match_one_process(parallel, optimizer):
    """Invariant: with gradient accumulation (no sync on the first micro-step) and sharded
    optimizer states, the losses equal one process's on the global batch of 8."""
    alone = Trainer(tiny_gpt2(), settings(8, optimizer=optimizer), FixedRows(global_rows(8), 8))
    expected = [m.loss for m in alone.fit().history]
    (losses, states), (_, other_states) = launch(train_losses, 2,
                                                 args=(parallel, 2, 2, optimizer))
    assert losses == pytest.approx(expected, rel=1e-5)  # rank 0 keeps the history
    assert losses[-1] < losses[0]
    if parallel == "zero1":  # every parameter's states on one rank, and each rank keeps some
        assert states + other_states == states_here(alone.optimizer)
        assert states > 0 and other_states > 0


def run(parallel: str, out_dir: str, max_steps: int, resume: bool,
        optimizer: str = "adamw") -> list[float]:
    rank, world = dist.get_rank(), dist.get_world_size()
    source = FixedRows(global_rows(8), 4, rank=rank, world_size=world)
    config = settings(4, parallel=parallel, max_steps=max_steps, out_dir=out_dir,
                      checkpoint_interval=2, optimizer=optimizer)
    return [m.loss for m in Trainer(tiny_gpt2(), config, source).fit(resume=resume).history]


@pytest.mark.slow
@pytest.mark.parametrize(("parallel", "optimizer"),
                         [("zero1", "adamw"), ("zero1", "muon"), ("fsdp", "adamw")])
def test_a_stopped_sharded_run_resumes_where_it_stopped(tmp_path, parallel, optimizer):
    """Invariant: steps 3-4 after a resume from step 2 are the steps of an uninterrupted run, so
    the weights and every rank's share of the optimizer states came back."""
    straight = launch(run, 2, args=(parallel, str(tmp_path / "straight"), STEPS, False,
                                    optimizer))[0]
    launch(run, 2, args=(parallel, str(tmp_path / "stopped"), 2, False, optimizer))
    checkpoint = tmp_path / "stopped" / "checkpoints" / "step_0000002"
    verify_checkpoint(checkpoint)  # FSDP: the shards of both ranks are covered by checksums
    # ZeRO-1 gathers its optimizer states into rank 0's state.pt; FSDP writes shards with DCP.
    assert is_sharded(checkpoint) == (parallel == "fsdp")
    assert (checkpoint / "model.safetensors").exists() == (parallel == "zero1")
    resumed = launch(run, 2, args=(parallel, str(tmp_path / "stopped"), STEPS, True,
                                   optimizer))[0]
    assert resumed == pytest.approx(straight[2:], rel=1e-6)


@pytest.mark.slow
def test_a_damaged_shard_is_caught_and_the_older_checkpoint_used(tmp_path):
    launch(run, 2, args=("fsdp", str(tmp_path), STEPS, False))
    newest = tmp_path / "checkpoints" / "step_0000004"
    shard = sorted((newest / "dcp").glob("*.distcp"))[-1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one damaged byte in one rank's shard
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorrupt, match=shard.name):
        verify_checkpoint(newest)
    found, skipped = newest_verified_checkpoint(tmp_path / "checkpoints")
    assert found.name == "step_0000002" and shard.name in skipped[0]


def test_unknown_strategy_is_named():
    with pytest.raises(ValueError, match="parallel='zero3'.*'ddp', 'zero1', 'fsdp'"):
        TrainConfig(parallel="zero3")
    with pytest.raises(ValueError, match="8-bit"):
        TrainConfig(parallel="fsdp", optimizer="adam-8bit")


def test_one_process_ignores_the_strategy():
    trainer = Trainer(tiny_gpt2(), settings(8, parallel="fsdp"), FixedRows(global_rows(8), 8))
    assert trainer.strategy == "none" and trainer.forward_model is trainer.model
    assert isinstance(trainer.optimizer, torch.optim.AdamW)


def test_cli_names_an_unknown_strategy(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--profile", "smoke", "--parallel", "zero3"])
    assert exit_info.value.code == 2
    assert "--parallel zero3: use one of ddp, zero1, fsdp" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_trains_with_fsdp_under_torchrun(tmp_path):
    """`torchrun ... llmlab train --parallel fsdp` trains and writes sharded checkpoints (the
    trainer test above covers resuming from them)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m",
               "llmlab", "train", "--profile", "smoke", "--parallel", "fsdp", "--steps", "2",
               "--checkpoint-every", "1", "--out", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "2 steps on 2 process(es)" in run.stdout
    for step in (1, 2):
        verify_checkpoint(tmp_path / "checkpoints" / f"step_{step:07d}")
        assert is_sharded(tmp_path / "checkpoints" / f"step_{step:07d}")


def test_a_sharded_checkpoint_is_not_loaded_by_an_unsharded_run(tmp_path):
    (tmp_path / "step_0000002" / "dcp").mkdir(parents=True)
    trainer = Trainer(tiny_gpt2(), settings(8), FixedRows(global_rows(8), 8))
    with pytest.raises(CheckpointMismatch, match="sharded.*strategy is 'none'"):
        trainer.resume(tmp_path / "step_0000002")
