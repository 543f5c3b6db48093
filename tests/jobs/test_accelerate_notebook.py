"""notebook_launch(): a function defined here, as in a notebook cell, trains with Accelerate on two
real ranks of one gloo group; the mistakes that leave each rank alone, or hide which rank failed,
are caught.

Each launch runs in a freshly spawned interpreter: notebook_launcher refuses to start where
bitsandbytes is imported or an Accelerator exists, and other tests in the same pytest worker leave
both behind (a notebook kernel restarted before the lab has neither)."""

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch
import torch.distributed as dist
from accelerate import Accelerator
from torch import nn

from llmlab.distributed import LaunchError
from llmlab.jobs.accelerate_notebook import notebook_launch

STEPS = 3


def fresh(fn, *args, **kwargs):
    """fn(*args, **kwargs) in a new interpreter (spawned: nothing imported but what fn needs)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def train(cpu: bool = True) -> dict:
    """A few SGD steps of a linear model, each rank on its own batch."""
    accelerator = Accelerator(cpu=cpu)
    rank, world = accelerator.process_index, accelerator.num_processes
    print(f"training on rank {rank} of {world}", flush=True)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)  # DDP over gloo when world > 1
    data = torch.Generator().manual_seed(100 + rank)  # a different batch on each rank
    for _ in range(STEPS):
        x = torch.randn(8, 4, generator=data)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    weight = accelerator.unwrap_model(model).weight.detach().clone()
    place = {"rank": rank, "world": world, "backend": dist.get_backend() if world > 1 else None,
             "threads": torch.get_num_threads(), "weight": weight}
    accelerator.end_training()  # destroys the process group
    return place


def test_a_notebook_function_trains_on_two_ranks_of_one_group(capfd):
    ranks = fresh(notebook_launch, train, nprocs=2)
    assert [(r["rank"], r["world"], r["backend"]) for r in ranks] == [(0, 2, "gloo"),
                                                                     (1, 2, "gloo")]
    assert [r["threads"] for r in ranks] == [1, 1]  # two ranks on two cores: one thread each
    # Invariant: the ranks trained on different batches yet hold the same weights, so DDP
    # averaged their gradients (alone, each would have followed its own batch).
    assert torch.equal(ranks[0]["weight"], ranks[1]["weight"])
    torch.manual_seed(0)
    assert not torch.allclose(ranks[0]["weight"], nn.Linear(4, 1).weight)  # and they did train
    # (No Accelerator out here: one made in the notebook makes notebook_launcher refuse.)
    printed = capfd.readouterr().out
    assert "training on rank 0 of 2" in printed and "training on rank 1 of 2" in printed


def threads_here() -> int:
    Accelerator(cpu=True).end_training()  # with OMP_NUM_THREADS unset, it picks cores / ranks
    return torch.get_num_threads()


def test_each_rank_gets_the_threads_asked_for():
    assert fresh(notebook_launch, threads_here, nprocs=2, threads=2) == [2, 2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="shows what happens without a GPU")
def test_an_accelerator_without_cpu_true_is_caught_training_alone():
    with pytest.raises(LaunchError, match=r"counted 1 process\(es\) of the 2 started"):
        fresh(notebook_launch, train, nprocs=2, args=(False,))


def fails_on_rank_1():
    accelerator = Accelerator(cpu=True)
    if accelerator.process_index == 1:
        raise ValueError("rank 1 gives up")
    dist.barrier()  # rank 0 waits for its partner, which is gone
    accelerator.end_training()


def test_the_rank_that_failed_is_named_with_its_own_error():
    with pytest.raises(LaunchError, match=r"(?s)rank 1 raised \(failure 1 of .*rank 1 gives up"):
        fresh(notebook_launch, fails_on_rank_1, nprocs=2)


def hangs_on_rank_1():
    accelerator = Accelerator(cpu=True)
    if accelerator.process_index == 1:
        threading.Event().wait()  # forever: a rank stuck in a loop, or in I/O that never ends
    dist.barrier()  # rank 0 waits for it, as in a collective it never reaches


def test_ranks_that_hang_are_stopped_after_the_timeout():
    # the outcome does not depend on speed: the rank hangs forever, however fast it starts
    with pytest.raises(LaunchError, match=r"(?s)the ranks did not finish within 2 s and were "
                       r"stopped.*rank\(s\) \[0, 1\] ended without a result"):
        fresh(notebook_launch, hangs_on_rank_1, nprocs=2, timeout_s=2)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"nprocs": 1}, "nprocs must be 2 or more"),
    ({"threads": 0}, "threads must be a positive"),
    ({"timeout_s": 0}, "timeout_s must be a positive"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        notebook_launch(train, **kwargs)
