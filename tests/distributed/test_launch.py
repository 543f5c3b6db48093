"""launch(): real processes, real gloo groups, and the failures users hit."""

import os
import signal
import subprocess
import sys
import threading

import pytest
import torch
import torch.distributed as dist
from helpers.launch import RecordingBar, job_env, survivors, write_pid, written_pids

from llmlab.distributed import LaunchError, launch
from llmlab.distributed.launch import GRACE_S, OutputLines

needs_linux = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; Linux's prctl")


def _rank_and_sum():
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    print(f"threads={torch.get_num_threads()}")
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": value.item()}


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_launch_returns_each_ranks_result_in_order(nprocs, capsys):
    results = launch(_rank_and_sum, nprocs=nprocs, timeout_s=60)
    total = nprocs * (nprocs + 1) / 2
    assert results == [{"rank": r, "world": nprocs, "sum": total} for r in range(nprocs)]
    output = capsys.readouterr().out
    for rank in range(nprocs):
        assert f"[rank {rank}] threads=1" in output  # prefixed, and one math thread each


def test_launch_runs_a_locally_defined_function_with_arguments():
    scale = 3.0

    def scaled(x):  # a closure, as a notebook cell would define: fork needs no import by name
        return x * scale * (dist.get_rank() + 1)

    out = launch(scaled, nprocs=2, args=(torch.ones(2),))
    assert torch.equal(out[0], torch.full((2,), 3.0)) and torch.equal(out[1], torch.full((2,), 6.0))


def _fails_on_rank_one():
    if dist.get_rank() == 1:
        raise ValueError("wrong shape on purpose")
    threading.Event().wait()  # rank 0 would wait here for ever: only the launcher can stop it


def test_an_error_on_one_rank_names_it_and_stops_the_others():
    # The launcher's own limit is far away: the others are stopped GRACE_S after the error.
    stopped = rf"rank\(s\) \[0\], still running {GRACE_S:g} s later, were stopped$"
    with pytest.raises(LaunchError, match=rf"(?s)rank 1 raised.*ValueError: wrong.*{stopped}"):
        launch(_fails_on_rank_one, nprocs=2, timeout_s=600)


def _dies_on_rank_zero():
    if dist.get_rank() == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def test_a_rank_that_dies_is_named_with_its_signal():
    with pytest.raises(LaunchError, match=r"rank 0 was killed by signal SIGKILL"):
        launch(_dies_on_rank_zero, nprocs=2, timeout_s=60)


def _rank_one_hangs():
    if dist.get_rank() == 1:
        threading.Event().wait()  # never returns; rank 0 returns, then waits in the last barrier


def test_a_hang_ends_at_the_timeout_naming_only_the_ranks_still_running():
    # 5 s: forked ranks import nothing, and rank 0 has returned within 0.1 s of the fork (0.04 s
    # measured on 2 loaded cores); the test waits the whole timeout, so no more than needed
    with pytest.raises(LaunchError, match=r"^rank\(s\) \[1\] did not finish within 5 s"):
        launch(_rank_one_hangs, nprocs=2, timeout_s=5)


def _start_a_sleeper_then_fail_on_rank_one(folder):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    write_pid(folder, f"sleeper-{dist.get_rank()}", sleeper.pid)
    dist.barrier()  # both have started theirs
    if dist.get_rank() == 1:
        raise ValueError("failed on purpose")
    threading.Event().wait()  # rank 0 is stopped by the launcher


@needs_linux
def test_processes_that_ranks_started_go_with_them(tmp_path):
    with pytest.raises(LaunchError, match="failed on purpose"):
        launch(_start_a_sleeper_then_fail_on_rank_one, nprocs=2, args=(tmp_path,), timeout_s=600)
    assert survivors(written_pids(tmp_path, 2)) == []


# A notebook kernel that launches two ranks which wait for ever.
KERNEL = """
import os, sys, threading
from pathlib import Path
import torch.distributed as dist
from llmlab.distributed import launch

def wait_for_ever(folder):
    Path(folder, f"rank-{dist.get_rank()}.pid").write_text(str(os.getpid()))
    threading.Event().wait()

launch(wait_for_ever, nprocs=2, args=(sys.argv[1],), timeout_s=600)
"""


@needs_linux
def test_the_ranks_go_when_the_launching_process_is_killed(tmp_path):
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, str(tmp_path)], env=job_env())
    try:
        ranks = written_pids(tmp_path, 2)
    finally:
        kernel.kill()  # as a notebook kernel is, by its user or for lack of memory
        kernel.wait()
    assert survivors(ranks) == []


# The same, each rank having started a child first.
KERNEL_RANKS_WITH_CHILDREN = KERNEL.replace(
    "    threading.Event().wait()",
    "    import subprocess\n"
    "    child = subprocess.Popen(['sleep', '600'])\n"
    "    Path(folder, f'child-{dist.get_rank()}.pid').write_text(str(child.pid))\n"
    "    threading.Event().wait()")


@needs_linux
def test_what_the_ranks_started_goes_with_them_when_the_launching_process_is_killed(tmp_path):
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL_RANKS_WITH_CHILDREN, str(tmp_path)],
                              env=job_env())
    try:
        pids = written_pids(tmp_path, 4)  # two ranks, two children
    finally:
        kernel.kill()
        kernel.wait()
    assert survivors(pids) == []


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match="positive integer"):
        launch(_rank_and_sum, nprocs=0)
    if torch.cuda.device_count() < 2:
        with pytest.raises(ValueError, match="one CUDA GPU per rank"):
            launch(_rank_and_sum, nprocs=2, backend="nccl")



def _rank_0_counts_to_three():
    for step in range(3 if dist.get_rank() == 0 else 5):
        print(f"rank {dist.get_rank()} step {step + 1}", flush=True)


def test_launch_progress_is_fed_by_rank_0s_lines(bars):
    launch(_rank_0_counts_to_three, nprocs=2, timeout_s=60, progress="demo", progress_lines=3)
    [bar] = bars
    assert (bar.desc, bar.total, bar.closed) == ("demo", 3, True)
    assert bar.postfixes == ["rank 0 step 1", "rank 0 step 2", "rank 0 step 3"]


def test_gloos_connection_notice_is_left_out_and_its_errors_are_kept(capsys):
    """Torch 2.10's gloo prints the notice on every rank at each group's start; torchrun's
    prefix may come before it. A gloo error is kept, whatever it starts with."""
    bar = RecordingBar()
    printer = OutputLines(prefix="[rank 0] ", bar=bar)
    printer.feed(b"[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected "
                 b"peer ranks is : 1\nstep 1\n[default0]:[Gloo] Rank 1 is connected to 3 peer "
                 b"ranks. Expected number of connected peer ranks is : 3\n[Gloo] Rank 0: "
                 b"Timed out waiting 2000ms\nstep 2")
    printer.close()
    kept = ["step 1\n", "[Gloo] Rank 0: Timed out waiting 2000ms\n", "step 2\n"]
    assert printer.lines == kept
    assert capsys.readouterr().out == "".join("[rank 0] " + line for line in kept)
    assert bar.postfixes == [line.strip() for line in kept]


def test_without_progress_no_bar_is_made(bars):
    launch(_rank_0_counts_to_three, nprocs=2, timeout_s=60)
    assert bars == []
