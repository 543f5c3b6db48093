"""DDP on CPU (gloo): two processes with the same global batch train exactly like one.

Invariant: each rank computes the gradient of its half of the global batch; DDP averages the
two during backward (on the last micro-step only), which is the gradient of the whole batch.
"""

import pytest
import torch
import torch.distributed as dist
from helpers.train_fakes import FixedRows, global_rows, tiny_gpt2

from llmlab.distributed import launch
from llmlab.train import TrainConfig, Trainer

STEPS = 4


def settings(micro_batch_size: int, grad_accum_steps: int) -> TrainConfig:
    return TrainConfig(max_steps=STEPS, micro_batch_size=micro_batch_size, seq_len=16,
                       grad_accum_steps=grad_accum_steps, dtype="fp32", device="cpu",
                       warmup_steps=1, lr=3e-3, log_interval=1, eval_interval=100,
                       progress=False)


def rank_losses(micro: int, accum: int) -> list[float]:
    """One rank's losses, training on its half of every global batch of 8 (DDP, the default)."""
    source = FixedRows(global_rows(8), micro, rank=dist.get_rank(),
                       world_size=dist.get_world_size())
    return [m.loss for m in Trainer(tiny_gpt2(), settings(micro, accum), source).fit().history]


@pytest.mark.parametrize("micro, accum", [(4, 1), (2, 2)], ids=["no-accumulation", "accumulation"])
def test_two_processes_match_one_process_with_the_same_global_batch(micro, accum):
    one_process = Trainer(tiny_gpt2(), settings(8, 1), FixedRows(global_rows(8), 8)).fit()
    # Forked ranks (launch), not spawned ones: a spawned rank imports torch and llmlab again,
    # seconds each, where the training itself takes a fraction of one.
    two_processes = launch(rank_losses, 2, args=(micro, accum))[0]  # rank 0 keeps the history
    expected = [m.loss for m in one_process.history]
    assert two_processes == pytest.approx(expected, rel=1e-5)
    assert len(two_processes) == STEPS and two_processes[-1] < two_processes[0]


def test_trainer_alone_is_not_distributed():
    assert not dist.is_initialized()
    trainer = Trainer(tiny_gpt2(), settings(8, 1), FixedRows(global_rows(8), 8))
    assert trainer.forward_model is trainer.model and torch.device("cpu") == trainer.device
