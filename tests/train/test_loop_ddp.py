"""DDP on CPU (gloo): two processes with the same global batch train exactly like one.

Invariant: each rank computes the gradient of its half of the global batch; DDP averages the
two during backward (on the last micro-step only), which is the gradient of the whole batch.
"""

import json
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers.train_fakes import FixedRows, global_rows, tiny_gpt2

from llmlab.train import TrainConfig, Trainer

STEPS = 4


def settings(micro_batch_size: int, grad_accum_steps: int) -> TrainConfig:
    return TrainConfig(max_steps=STEPS, micro_batch_size=micro_batch_size, seq_len=16,
                       grad_accum_steps=grad_accum_steps, dtype="fp32", device="cpu",
                       warmup_steps=1, lr=3e-3, log_interval=1, eval_interval=100,
                       progress=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_on_rank(rank: int, world_size: int, port: int, micro: int, accum: int, out) -> None:
    torch.set_num_threads(1)  # two processes on two cores: one math thread each (as torchrun does)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    try:
        source = FixedRows(global_rows(8), micro, rank=rank, world_size=world_size)
        history = Trainer(tiny_gpt2(), settings(micro, accum), source).fit().history
        if rank == 0:
            with open(out, "w") as f:
                json.dump([m.loss for m in history], f)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("micro, accum", [(4, 1), (2, 2)], ids=["no-accumulation", "accumulation"])
def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path, micro, accum):
    one_process = Trainer(tiny_gpt2(), settings(8, 1), FixedRows(global_rows(8), 8)).fit()
    out = tmp_path / "losses.json"
    mp.spawn(train_on_rank, args=(2, free_port(), micro, accum, str(out)), nprocs=2, join=True)
    two_processes = json.loads(out.read_text())
    expected = [m.loss for m in one_process.history]
    assert two_processes == pytest.approx(expected, rel=1e-5)
    assert len(two_processes) == STEPS and two_processes[-1] < two_processes[0]


def test_trainer_alone_is_not_distributed():
    assert not dist.is_initialized()
    trainer = Trainer(tiny_gpt2(), settings(8, 1), FixedRows(global_rows(8), 8))
    assert trainer.forward_model is trainer.model and torch.device("cpu") == trainer.device
