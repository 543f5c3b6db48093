"""Start N ranks that work together, from a notebook, a test or a terminal.

`launch(fn, nprocs)` runs a Python function on N ranks that have already joined a process group,
and returns what each rank returned. It forks, so a function defined in a notebook cell works
(the "spawn" start method would have to import it by name, and a notebook has no module name).

It shows every rank's output prefixed with its rank, stops every rank when one fails or hangs,
and raises `LaunchError` naming the rank that caused it. No process of a run outlives it: not the
processes a rank started, and not the ranks when the launching process (a notebook kernel) is
killed. (Running a script under `torchrun` or DeepSpeed's launcher, as training jobs are
launched: `llmlab.jobs.processes.run_script`, which shows its output with this module's
`OutputLines`.)
"""

import contextlib
import os
import pickle
import re
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from multiprocessing import get_context

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from llmlab.distributed.groups import leave_process_group

# Seconds the other ranks get to finish on their own after one rank failed, before they are
# stopped: they are usually blocked in a collective that the failed rank will never join.
GRACE_S = 2.0


class LaunchError(RuntimeError):
    """One or more ranks failed, died or hung; the message says which and why."""


def check_nprocs(nprocs: int) -> None:
    """Refuse a process count that is not a positive integer (llmlab.jobs' commands call it too)."""
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive integer, got {nprocs!r}")


def _stop_group_when_orphaned(parent_pid: int) -> None:
    """In a rank: a thread that, once the launching process is gone (a notebook kernel killed),
    SIGKILLs the rank's process group, the rank and what it started. (PR_SET_PDEATHSIG would kill
    the rank alone, and leave its children running.)"""

    def watch() -> None:
        while os.getppid() == parent_pid:  # re-parented once the launcher is gone
            time.sleep(0.2)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="llmlab-stop-when-orphaned", daemon=True).start()


def _rank_main(
    fn, args, rank, nprocs, listener, backend, timeout_s, threads, out_fd, result, parent_pid
) -> None:
    """The body of one forked rank: redirect output, join the group, run, report, leave."""
    os.setpgid(0, 0)  # a process group of its own: stopping it stops what it started too
    _stop_group_when_orphaned(parent_pid)
    os.dup2(out_fd, 1)  # C++ (gloo, NCCL) writes to file descriptors 1 and 2, not sys.stdout
    os.dup2(out_fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the rank
    sys.stderr = sys.stdout
    port = listener.getsockname()[1]
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nprocs),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # One math thread per rank: N ranks with many OpenMP threads each on a few cores run slower
    # than one thread each; and a forked child must not reuse the parent's thread pool.
    torch.set_num_threads(threads)
    code = 0
    try:
        # Rank 0 serves the rendezvous on the socket the launcher opened before forking, so the
        # port was never free for another process to take (a port only picked could be).
        serves = rank == 0
        store = dist.TCPStore("127.0.0.1", port, nprocs, is_master=serves,
                              timeout=timedelta(seconds=timeout_s),
                              master_listen_fd=listener.fileno() if serves else None)
        if not serves:
            listener.close()
        dist.init_process_group(backend, store=store, rank=rank, world_size=nprocs,
                                timeout=timedelta(seconds=timeout_s))
        value = fn(*args)
        result.send_bytes(pickle.dumps(("ok", value)))
        leave_process_group()
    except BaseException:
        code = 1
        with contextlib.suppress(Exception):
            result.send_bytes(pickle.dumps(("error", traceback.format_exc())))
        if dist.is_initialized():
            leave_process_group(wait_for_others=False)
    finally:
        sys.stdout.flush()
        os._exit(code)  # skip the parent's exit handlers (a notebook kernel's, pytest's)


# What the gloo in torch 2.10 prints on every rank each time a process group starts ("[Gloo] Rank
# 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"), whatever the
# logging settings: it says nothing a learner needs, and crowds out what the ranks print.
_GLOO_NOTICE = re.compile(r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. "
                          r"Expected number of connected peer ranks is : \d+$")


def is_gloo_notice(line: str) -> bool:
    """Whether `line` (after any launcher's prefix) is gloo's connection notice."""
    return _GLOO_NOTICE.search(line.rstrip()) is not None


# How a process's output is shown, here and by llmlab.jobs' runners (which import it, since jobs
# sits above distributed): one line printer, one progress bar, one exit message for both.
class OutputLines:
    """Collects a process's output bytes, prints whole lines with `prefix` in front (unless
    `echo` is False) and keeps them (without it) in `lines`. Each line that `counts` accepts
    moves `bar` (a progress bar, or None) one on and shows there. Gloo's connection notices are
    left out."""

    def __init__(self, prefix: str = "", bar=None, echo: bool = True,
                 counts: Callable[[str], bool] = lambda line: True):
        self.prefix, self.partial, self.lines = prefix, b"", []
        self.bar, self.echo, self.counts = bar, echo, counts

    def feed(self, data: bytes) -> None:
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            text = line.decode(errors="replace")
            if is_gloo_notice(text):
                continue
            self.lines.append(text + "\n")
            if self.echo:
                print(self.prefix + self.lines[-1], end="", flush=True)
            if self.bar is not None and self.counts(self.lines[-1]):
                self.bar.set_postfix_str(self.lines[-1].strip()[-60:], refresh=False)
                self.bar.update()

    def close(self) -> None:
        if self.partial:
            self.feed(b"\n")


def progress_bar(progress: str | None, lines: int | None):
    """A bar that counts a job's output lines (`lines`: how many it will print, if known), or
    None when no progress was asked for. A bar, not the lines alone: rank 0 may print nothing
    for seconds, and the bar's clock shows the job is still running."""
    return None if progress is None else tqdm(desc=progress, total=lines, unit="line")


def describe_exit(code: int | None) -> str:
    """'exited with code 1' or 'was killed by signal SIGKILL', from a process's exit code."""
    if code is not None and code < 0:
        return f"was killed by signal {signal.Signals(-code).name}"
    return f"exited with code {code}"


def launch(
    fn: Callable,
    nprocs: int = 2,
    args: Sequence = (),
    backend: str = "gloo",
    timeout_s: float = 120,
    threads: int = 1,
    progress: str | None = None,
    progress_lines: int | None = None,
) -> list:
    """Run `fn(*args)` on `nprocs` ranks of a fresh process group; return each rank's result.

    Each rank sees RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT as under torchrun, and the
    group is already initialised (`dist.get_rank()` works). Results come back pickled, in rank
    order: return CPU tensors, numbers or dicts. A collective waits at most `timeout_s`, so a rank
    that never arrives ends the run with an error instead of a hang. `progress` names a progress
    bar fed by rank 0's lines (`progress_lines` of them, if known).
    """
    check_nprocs(nprocs)
    if backend == "nccl" and torch.cuda.device_count() < nprocs:
        raise ValueError(
            f"the nccl backend needs one CUDA GPU per rank: {nprocs} ranks, "
            f"{torch.cuda.device_count()} GPUs. Use backend='gloo' to run on the CPU."
        )
    if dist.is_initialized():
        raise RuntimeError("launch() starts its own process group: call it outside of one")
    context = get_context("fork")
    ranks = []
    # The rendezvous socket, opened here and served by rank 0 (see _rank_main); the launcher's
    # copy closes once every rank has its own.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        for rank in range(nprocs):
            out_read, out_write = os.pipe()
            result_read, result_write = context.Pipe(duplex=False)
            process = context.Process(
                target=_rank_main, name=f"rank {rank}", daemon=True,
                args=(fn, args, rank, nprocs, listener, backend, timeout_s, threads, out_write,
                      result_write, os.getpid()),
            )
            process.start()
            os.close(out_write)  # the parent keeps only the reading ends
            result_write.close()
            ranks.append((process, out_read, result_read))
    bar = progress_bar(progress, progress_lines)
    try:
        return _supervise(ranks, timeout_s, bar)
    finally:
        if bar is not None:
            bar.close()
        for _, out_read, result_read in ranks:
            os.close(out_read)
            result_read.close()


def _stop_rank(process) -> None:
    """SIGKILL a rank and every process it started (its process group), then reap it."""
    # Before the rank is reaped its pid, the group's id, cannot be reused by another process.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.kill()  # in case it was stopped before it made its group
    process.join()


def _supervise(ranks: list, timeout_s: float, bar=None) -> list:
    """Show the ranks' output as it comes (rank 0's also on `bar`); collect their results; stop
    them all on a failure."""
    selector = selectors.DefaultSelector()
    printers = {}
    for rank, (process, out_read, result_read) in enumerate(ranks):
        printers[rank] = OutputLines(f"[rank {rank}] ", bar if rank == 0 else None)
        selector.register(out_read, selectors.EVENT_READ, ("output", rank))
        selector.register(result_read, selectors.EVENT_READ, ("result", rank))
        selector.register(process.sentinel, selectors.EVENT_READ, ("exit", rank))
    results: dict[int, object] = {}
    failure: str | None = None
    deadline = time.monotonic() + timeout_s
    stop_at = deadline  # a failure brings it forward: the others get GRACE_S to end on their own
    exited: set[int] = set()
    finished: set[int] = set()  # ranks whose function returned or raised
    died = False  # the failure is a rank killed by a signal
    try:
        while len(exited) < len(ranks):
            remaining = stop_at - time.monotonic()
            if remaining <= 0:
                break
            for key, _ in selector.select(timeout=min(remaining, 0.5)):
                kind, rank = key.data
                process, out_read, result_read = ranks[rank]
                if kind == "output":
                    data = os.read(out_read, 1 << 16)
                    if data:
                        printers[rank].feed(data)
                    else:
                        selector.unregister(out_read)
                elif kind == "result":
                    try:
                        status, value = pickle.loads(result_read.recv_bytes())
                    except EOFError:
                        selector.unregister(result_read)
                        continue
                    selector.unregister(result_read)
                    finished.add(rank)
                    if status == "ok":
                        results[rank] = value
                    elif failure is None:
                        failure = f"rank {rank} raised an error:\n{value}"
                        stop_at = min(stop_at, time.monotonic() + GRACE_S)
                else:
                    selector.unregister(process.sentinel)
                    exited.add(rank)
                    _stop_rank(process)  # what it started goes with it
                    # A rank killed by a signal is the cause; a partner's error in a collective
                    # (often "connection reset") may reach us first, and is only its consequence.
                    killed = process.exitcode is not None and process.exitcode < 0
                    if rank not in results and (failure is None or killed and not died):
                        died = killed
                        failure = (
                            f"rank {rank} {describe_exit(process.exitcode)} before it finished"
                        )
                        stop_at = min(stop_at, time.monotonic() + GRACE_S)
    finally:
        for rank, (process, _, _) in enumerate(ranks):
            if rank not in exited:
                _stop_rank(process)
    for rank, (_, out_read, _) in enumerate(ranks):
        drain(out_read, printers[rank])
    selector.close()
    # A rank that returned may still wait in the group's last barrier: it is not the one that hung.
    running = sorted(set(range(len(ranks))) - finished - exited)
    if running and stop_at == deadline:
        failure = (f"{failure}\n" if failure else "") + (
            f"rank(s) {running} did not finish within {timeout_s:g} s: a rank waiting in a "
            "collective that another rank never reaches hangs until then"
        )
    elif running:
        failure += f"\nrank(s) {running}, still running {GRACE_S:g} s later, were stopped"
    if failure is not None:
        raise LaunchError(failure)
    return [results[rank] for rank in range(len(ranks))]


def drain(fd: int, printer: OutputLines) -> None:
    """Print what a process (a rank, a launcher) wrote just before it ended."""
    os.set_blocking(fd, False)
    with contextlib.suppress(BlockingIOError):
        while data := os.read(fd, 1 << 16):
            printer.feed(data)
    printer.close()
