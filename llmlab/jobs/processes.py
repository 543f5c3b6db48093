"""Run a job's command (a launcher, a batch script) and stop every process it started.

`run_script(path, nprocs)` runs a script under `torchrun` (or DeepSpeed's launcher, `deepspeed`),
the way training jobs are launched; `run_command(command)` runs any command that starts a job;
`kill_process_tree(pid)` stops a process and all it started at once, like a lost node.

Both runners show the output as it comes (a rank's lines prefixed with its rank, as in
`llmlab.distributed.launch`), raise `LaunchError` on a failure or past their time, and leave no
process of the job running: not what a rank started, not a daemon the command left, and not the
launcher when the launching process (a notebook kernel) is killed.
"""

import contextlib
import ctypes
import functools
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import torch

from llmlab.distributed.launch import (
    LaunchError,
    OutputLines,
    describe_exit,
    drain,
    progress_bar,
)
from llmlab.jobs.commands import deepspeed_command, free_port, torchrun_command

_PR_SET_PDEATHSIG = 1  # prctl's option numbers, from <linux/prctl.h>
_PR_SET_CHILD_SUBREAPER = 36
# Looked up once, here: a child between fork and exec must not load symbols (a lock another
# thread of the parent held at the fork would never be released in the child).
_PRCTL = ctypes.CDLL(None).prctl if sys.platform == "linux" else None


@contextlib.contextmanager
def _adopting_orphans():
    """While inside, a process whose parent exits (a daemon a command leaves behind, double
    forked so as to descend from nothing) is re-parented to this process instead of init, so it
    can still be found (Linux; elsewhere only descendants are). Yields a function that lists
    the processes this process gained inside: its descendants that were not there before (one
    job at a time: a process another thread started meanwhile would be listed too)."""
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}
    if _PRCTL is not None:
        _PRCTL(_PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield lambda: [child for child in me.children(recursive=True) if child.pid not in before]
    finally:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_CHILD_SUBREAPER, 0)


def _stop_all(processes: list[psutil.Process], wait_s: float = 5) -> None:
    """SIGKILL these processes and wait for them to go, `wait_s` at most (a killed process that
    is not this process's child stays a zombie until its own parent reaps it)."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(processes, timeout=wait_s)


def _die_with_parent(parent_pid: int, signum: int) -> None:
    """In a child process: have Linux send it `signum` when `parent_pid` (its parent) dies, so a
    killed notebook kernel leaves nothing running. Elsewhere, nothing."""
    if _PRCTL is None:
        return
    _PRCTL(_PR_SET_PDEATHSIG, signum)
    if os.getppid() != parent_pid:  # the parent died before the request was made
        os.kill(os.getpid(), signum)


SCRIPT_LAUNCHERS = ("torchrun", "deepspeed")
# What each launcher's output shows of the failed rank, for the error message.
_FAILURE_HINTS = {
    "torchrun": "torchrun's error report names the failed rank",
    "deepspeed": "DeepSpeed's launcher does not prefix lines with ranks, and its 'exits with "
    "return code' line shows the last rank's command, whichever rank failed",
}


def run_script(
    script: str | Path,
    nprocs: int = 2,
    script_args: Sequence[str] = (),
    module: bool = False,
    timeout_s: float = 600,
    threads: int = 1,
    env: dict[str, str] | None = None,
    launcher: str = "torchrun",
    torchrun_args: Sequence[str] = (),
    progress: str | None = None,
    progress_lines: int | None = None,
) -> str:
    """Run a script (or `module=True`: a module) under `launcher` (torchrun or deepspeed) on
    this machine; stream and return its output. `torchrun_args` go to torchrun (e.g.
    `["--max-restarts", "1"]` for an elastic restart). `progress` names a progress bar fed by
    rank 0's lines and the launcher's own (`progress_lines` of them, if known).

    torchrun prefixes each line with the rank that printed it (`[default0]:`); DeepSpeed's
    launcher does not. A failure raises `LaunchError` with the output's end; so does running past
    `timeout_s`, naming the ranks still running then. Either way, every process of the job (the
    launcher, the ranks and what they started) is stopped before it returns, and the launcher is
    stopped if this process dies.
    """
    if launcher not in SCRIPT_LAUNCHERS:
        raise ValueError(f"launcher {launcher!r}: use one of {SCRIPT_LAUNCHERS}")
    if not module and not Path(script).is_file():
        raise FileNotFoundError(f"no script at {script}: write it first (e.g. with %%writefile)")
    tag = secrets.token_hex(8)
    child_env = {**os.environ, "OMP_NUM_THREADS": str(threads), JOB_TAG: tag, **(env or {})}
    logs_folder = tempfile.TemporaryDirectory(prefix="torchrun-logs-")
    with logs_folder as logs, _adopting_orphans() as gained:
        if launcher == "torchrun":
            command = torchrun_command(script, nprocs, script_args, module, log_dir=logs,
                                       torchrun_args=torchrun_args)
        else:
            if torchrun_args:
                raise ValueError("torchrun_args are for launcher='torchrun'")
            # DeepSpeed's default port is torchrun's (29500): another job may hold it.
            command = deepspeed_command(script, nprocs, script_args, module,
                                        master_port=free_port())
            if not torch.cuda.is_available():
                child_env.setdefault("DS_ACCELERATOR", "cpu")  # named: no "no GPU found" warning
        # SIGTERM, not SIGKILL: torchrun and DeepSpeed's launcher stop their ranks on SIGTERM.
        die_with_us = functools.partial(_die_with_parent, os.getpid(), signal.SIGTERM)
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   env=child_env, preexec_fn=die_with_us)
        bar = progress_bar(progress, progress_lines)
        # torchrun prefixes a rank's lines with "[default<rank>]:"; its own lines have none.
        printer = OutputLines(bar=bar, counts=lambda line: not line.startswith("[default")
                         or line.startswith("[default0]"))
        try:
            finished = _stream(process.stdout.fileno(), printer, timeout_s)
            if finished:
                process.wait()  # its exit status, before _stop_job could reap it
            running = [] if finished else _ranks_of(_job_processes(tag), process.pid)
        finally:
            _stop_job(tag)  # a rank's child outlives a rank that failed; all of them past the time
            # and what the job's processes started without its tag (a clean environment), the
            # launcher aside: its exit status is read below
            _stop_all([child for child in gained() if child.pid != process.pid])
            drain(process.stdout.fileno(), printer)
            process.stdout.close()
            process.wait()
            if bar is not None:
                bar.close()
    tail = "".join(printer.lines[-25:])
    if not finished:
        still = f"rank(s) {running} still running" if running else "none of its ranks running"
        raise LaunchError(
            f"{launcher} ({' '.join(command[3:])}) did not finish within {timeout_s:g} s, "
            f"{still}; every process of the job was stopped.\nIts last lines:\n{tail}"
        )
    if process.returncode != 0:
        raise LaunchError(
            f"{launcher} {describe_exit(process.returncode)} ({' '.join(command[3:])}).\n"
            f"Its last lines ({_FAILURE_HINTS[launcher]}):\n{tail}"
        )
    return "".join(printer.lines)


def run_command(
    command: Sequence[str],
    env: dict[str, str] | None = None,
    timeout_s: float = 600,
    progress: str | None = None,
    progress_lines: int | None = None,
) -> str:
    """Run a command that starts a job (a launcher, a batch script) and return its output,
    stdout and stderr together, without printing it: the caller shows the lines that matter.
    `progress` names a progress bar fed by its lines. A failure or running past `timeout_s`
    raises `LaunchError` with the output's end; every process the command started is stopped,
    also when it ends first: what it left running (in the background, or double forked as a
    daemon) is stopped when it exits."""
    die_with_us = functools.partial(_die_with_parent, os.getpid(), signal.SIGTERM)
    bar = progress_bar(progress, progress_lines)
    printer = OutputLines(bar=bar, echo=False)
    finished = False
    with _adopting_orphans() as gained:
        process = subprocess.Popen(list(command), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, env=env,
                                   preexec_fn=die_with_us)
        try:
            # Until the command exits: a child it left may hold the output open for ever.
            finished = _stream(process.stdout.fileno(), printer, timeout_s, process)
            if finished:
                process.wait()
        finally:
            if not finished:
                kill_process_tree(process.pid)  # and everything it started
                process.wait()
            _stop_all(gained())  # what it left running, its daemons too
            drain(process.stdout.fileno(), printer)
            process.stdout.close()
            if bar is not None:
                bar.close()
    tail = "".join(printer.lines[-25:])
    if not finished:
        raise LaunchError(f"{' '.join(command)} did not finish within {timeout_s:g} s; it was "
                          f"stopped. Its last lines:\n{tail}")
    if process.returncode != 0:
        raise LaunchError(f"{' '.join(command)} {describe_exit(process.returncode)}. Its last "
                          f"lines:\n{tail}")
    return "".join(printer.lines)


def kill_process_tree(pid: int, wait_s: float | None = 30) -> None:
    """SIGKILL a process and all its descendants at once, like a lost node, and wait for them to
    go (wait_s=None: not, when `pid` is this process's child and the code that started it must
    read its exit code: waiting here would reap it). (torchrun starts its workers in sessions of
    their own, so killing its process group would leave them running.)"""
    with contextlib.suppress(psutil.NoSuchProcess):
        parent = psutil.Process(pid)
        tree = [*parent.children(recursive=True), parent]
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        if wait_s is not None:
            psutil.wait_procs(tree, timeout=wait_s)


# An environment variable every process of a run_script job inherits: it finds them all, even
# those whose parent died (they are re-parented) or that started sessions of their own.
JOB_TAG = "LLMLAB_JOB"


def _job_processes(tag: str) -> list[psutil.Process]:
    """The live processes whose environment carries `tag` (a zombie's environment reads empty)."""
    return [process for process in psutil.process_iter(["environ"])
            if (process.info["environ"] or {}).get(JOB_TAG) == tag]


def _ranks_of(processes: list[psutil.Process], launcher_pid: int) -> list[int]:
    """The ranks among `processes`: the launchers give each rank its RANK variable."""
    ranks = {process.info["environ"].get("RANK") for process in processes
             if process.pid != launcher_pid}
    return sorted(int(rank) for rank in ranks if rank is not None and rank.isdigit())


def _stop_job(tag: str) -> None:
    """SIGKILL every process of the job, again until none is left (one may start another)."""
    while processes := _job_processes(tag):
        # Short: a killed orphan stays a zombie until its new parent reaps it; the scan skips it.
        _stop_all(processes, wait_s=1)


def _stream(fd: int, printer: OutputLines, timeout_s: float,
            process: subprocess.Popen | None = None) -> bool:
    """Print a child's output line by line as it comes, until the child closes it or `process`
    (if given) has exited (True), or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (remaining := deadline - time.monotonic()) > 0:
            if selector.select(timeout=min(remaining, 0.5)):
                data = os.read(fd, 1 << 16)
                if not data:
                    return True
                printer.feed(data)
            elif process is not None and process.poll() is not None:
                return True  # it exited; the rest of its output is drained after
    return False
