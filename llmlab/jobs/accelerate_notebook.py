"""Accelerate's `notebook_launcher` on a machine without a GPU, made to start one real group.

What `notebook_launcher(fn, args, num_processes=2)` does on a CPU (measured, accelerate 1.15,
torch 2.13):
- it forks 2 processes through torch's elastic agent, so `fn` may be defined in a notebook
  cell; each gets RANK, LOCAL_RANK, WORLD_SIZE and MASTER_ADDR/PORT as under torchrun (it
  prints "Launching training on 2 CUDAs." all the same);
- in them, `Accelerator(cpu=True)` joins one gloo group of 2 (MULTI_CPU), while a plain
  `Accelerator()` finds no GPU and each process trains alone, as rank 0 of 1, without an error;
- the ranks meet at port 29500 unless `use_port` says otherwise: a second job there fails;
- it returns nothing, and when one rank fails, torch's agent may name another as the root cause
  (the first to exit: often a rank that lost its partner in a collective).

`notebook_launch(fn, nprocs)` runs notebook_launcher with a free port and one math thread per
rank, returns what each rank returned, names each rank's own error, and fails when the ranks'
Accelerator did not join them into one group.
"""

import math
import os
import pickle
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil
import torch
from accelerate import notebook_launcher
from accelerate.state import PartialState
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from llmlab.distributed.launch import LaunchError
from llmlab.jobs.commands import free_port
from llmlab.jobs.processes import kill_process_tree


def notebook_launch(
    fn: Callable, nprocs: int = 2, args: Sequence = (), threads: int = 1, timeout_s: float = 600
) -> list:
    """Run `fn(*args)` on `nprocs` ranks with Accelerate's `notebook_launcher`; return each rank's
    result, in rank order (pickled: return CPU tensors, numbers or dicts).

    `fn` creates its own `Accelerator(cpu=not torch.cuda.is_available())` (an Accelerator made in
    the notebook before the launch makes notebook_launcher refuse). Each rank gets `threads`
    math threads: several ranks sharing a few cores run slower with more. Ranks still running
    after `timeout_s` are stopped (with the processes they started) and LaunchError says so.
    """
    if not isinstance(nprocs, int) or nprocs < 2:
        raise ValueError(f"nprocs must be 2 or more, got {nprocs!r}: one process needs no "
                         "launcher, call the function")
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if not 0 < timeout_s < math.inf:  # also refuses NaN
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    before = {child.pid for child in psutil.Process().children()}
    stopped = threading.Event()
    timer = threading.Timer(timeout_s, _stop_new_children, args=(before, stopped))
    with tempfile.TemporaryDirectory(prefix="notebook-launch-") as outcomes:
        timer.start()
        try:
            notebook_launcher(_on_rank, args=(fn, tuple(args), threads, outcomes),
                              num_processes=nprocs, use_port=str(free_port()))
        except ChildFailedError:
            failures = _failures(Path(outcomes), nprocs)
            if stopped.is_set():  # the ranks were stopped, not failed
                failures = (f"the ranks did not finish within {timeout_s:g} s and were stopped: a "
                            "rank waiting in a collective that another never reaches hangs until "
                            f"then (raise timeout_s for a longer run)\n{failures}")
            raise LaunchError(failures) from None
        finally:
            timer.cancel()
        return [_read(Path(outcomes), rank)[1] for rank in range(nprocs)]


def _stop_new_children(before: set[int], stopped: threading.Event) -> None:
    """Kill the ranks: the children this process started since `before` (notebook_launcher's
    agent forks them from here), each with its own children. The agent then reports them failed."""
    stopped.set()  # first: the agent may report the first rank killed before the last one is
    for child in psutil.Process().children():
        if child.pid not in before:
            kill_process_tree(child.pid, wait_s=None)  # the agent reads its exit code


def _on_rank(fn: Callable, args: tuple, threads: int, outcomes: str) -> None:
    """One forked rank: run `fn`, check it ran in one group, leave its outcome in a file."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # Set before the Accelerator starts: when OMP_NUM_THREADS is unset it picks cores / ranks.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    try:
        value = fn(*args)
        # Accelerate's shared state keeps the Accelerator's view after end_training.
        counted = PartialState._shared_state.get("num_processes")
        if counted is not None and counted != world:
            raise RuntimeError(
                f"the Accelerator on rank {rank} counted {counted} process(es) of the {world} "
                "started: without a GPU, Accelerator() trains alone in each one. Create it as "
                "Accelerator(cpu=not torch.cuda.is_available())"
            )
        outcome = ("ok", value)
    except BaseException:
        outcome = ("error", (time.time(), traceback.format_exc()))
    (Path(outcomes) / f"{rank}.pickle").write_bytes(pickle.dumps(outcome))
    if outcome[0] == "error":
        raise RuntimeError(f"rank {rank} failed")  # the agent then stops the other ranks


def _read(outcomes: Path, rank: int) -> tuple[str, object]:
    path = outcomes / f"{rank}.pickle"
    if not path.is_file():
        return "lost", None
    return pickle.loads(path.read_bytes())


def _failures(outcomes: Path, nprocs: int) -> str:
    """Each failed rank's own error, the first to fail first."""
    errors, lost = [], []
    for rank in range(nprocs):
        status, value = _read(outcomes, rank)
        if status == "error":
            errors.append((value[0], rank, value[1]))
        elif status == "lost":
            lost.append(rank)
    lines = [f"rank {rank} raised (failure {i + 1} of {len(errors)}):\n{trace}"
             for i, (_, rank, trace) in enumerate(sorted(errors))]
    if lost:
        lines.append(f"rank(s) {lost} ended without a result: killed, or stopped by the agent "
                     "after another rank failed")
    return "\n".join(lines)
