"""Process groups: this process's place (alone, or in a launched group), the backend for the
machine, a `process_group` block that joins what srun or torchrun describes and always leaves
it, and a store of its own for an attempt torchrun's elastic agent restarted."""

import json
import os
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers.launch import LAUNCHER_NAMES

from llmlab.distributed import launch
from llmlab.distributed.groups import (
    DistInfo,
    _restart_store,
    default_backend,
    dist_info,
    process_group,
)
from llmlab.jobs.commands import free_port

ALONE = DistInfo(rank=0, local_rank=0, world_size=1)


def test_outside_a_group_this_is_the_only_process_and_the_main_one():
    assert dist_info() == ALONE
    assert ALONE.is_main and not ALONE.distributed
    rank_2 = DistInfo(rank=2, local_rank=0, world_size=4)  # first on the second node
    assert not rank_2.is_main and rank_2.distributed


def test_a_launched_rank_reads_its_place_from_the_group():
    assert launch(dist_info, nprocs=2, timeout_s=60) == [DistInfo(0, 0, 2), DistInfo(1, 1, 2)]


def test_nccl_on_a_gpu_machine_and_gloo_on_a_cpu_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_backend() == "nccl"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_backend() == "gloo"


@pytest.mark.parametrize("launched", [False, True], ids=["no launcher", "a world of 1"])
def test_a_lone_process_runs_without_a_group(monkeypatch, launched):
    for name in [*LAUNCHER_NAMES, *(name for name in os.environ if name.startswith("SLURM"))]:
        monkeypatch.delenv(name, raising=False)
    if launched:  # torchrun --nproc_per_node 1 (an address, so a wrong join would not hang)
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", "1")
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(free_port()))
    with process_group("gloo") as info:
        assert info == ALONE and not dist.is_initialized()
    assert not dist.is_initialized()


def _srun_task(rank: int, out: str, port: int) -> None:
    """One task as srun alone starts it: SLURM's names only, none of torchrun's."""
    for name in LAUNCHER_NAMES:
        os.environ.pop(name, None)
    os.environ.update(SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), SLURM_NTASKS="2",
                      SLURM_NODEID="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    with process_group("gloo") as info:
        value = torch.tensor([rank + 1.0])
        dist.all_reduce(value)
        seen = {"info": list(vars(info).values()), "sum": value.item(),
                "local rank": os.environ["LOCAL_RANK"]}
    seen["left"] = not dist.is_initialized()
    with open(f"{out}/rank_{rank}.json", "w") as file:
        json.dump(seen, file)


def test_two_srun_tasks_join_one_group_and_leave_it(tmp_path):
    ranks = mp.start_processes(_srun_task, args=(str(tmp_path), free_port()), nprocs=2,
                               join=False, start_method="fork")
    deadline = time.monotonic() + 60  # a rank that never arrives fails the test, not hangs it
    while not ranks.join(timeout=1):
        if time.monotonic() > deadline:
            for process in ranks.processes:
                process.kill()
            pytest.fail("the two tasks did not finish within 60 s")
    seen = [json.loads((tmp_path / f"rank_{rank}.json").read_text()) for rank in (0, 1)]
    assert seen == [{"info": [rank, rank, 2], "sum": 3.0, "local rank": str(rank), "left": True}
                    for rank in (0, 1)]


def test_only_a_restarted_attempt_gets_a_store_of_its_own(monkeypatch):
    """torchrun's agent store outlives an attempt: the first attempt uses it as env:// does, a
    restarted one under its own prefix, so it never reads keys a dead attempt wrote."""
    port = free_port()
    # A short timeout: a key under another name fails the test in seconds, not minutes.
    agent_store = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=5))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert _restart_store() is None
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    _restart_store().set("rank_0", "address of attempt 1")
    assert agent_store.get("llmlab/attempt_1/rank_0") == b"address of attempt 1"
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")  # each attempt's own store
    assert _restart_store() is None
