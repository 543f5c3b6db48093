"""Start N processes that work together, from a notebook, a test or a terminal.

Two ways, for two uses:
- `launch(fn, nprocs)` runs a Python function on N ranks that have already joined a process group,
  and returns what each rank returned. It forks, so a function defined in a notebook cell works
  (the "spawn" start method would have to import it by name, and a notebook has no module name).
- `run_script(path, nprocs)` runs a script under `torchrun` (or DeepSpeed's launcher, `deepspeed`),
  the way training jobs are launched.

Both show every rank's output prefixed with its rank, stop every rank when one fails or hangs,
and raise `LaunchError` naming the rank that caused it. No process of a job outlives it: not the
processes a rank started, and not the ranks when the launching process (a notebook kernel) is
killed.
"""

import contextlib
import ctypes
import functools
import os
import pickle
import random
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from multiprocessing import get_context
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from llmlab.distributed.groups import leave_process_group
from llmlab.files import write_atomically

# Seconds the other ranks get to finish on their own after one rank failed, before they are
# stopped: they are usually blocked in a collective that the failed rank will never join.
GRACE_S = 2.0


class LaunchError(RuntimeError):
    """One or more ranks failed, died or hung; the message says which and why."""


# Ports below Linux's ephemeral range (32768-60999 by default), which the kernel hands out for
# outgoing connections and port-0 binds: a port picked there can be taken by any new connection
# between the moment it is picked and the moment the launched job listens on it.
_PORTS = range(20000, 32768)


def free_port() -> int:
    """A TCP port nobody is listening on now, for a launched job's ranks to meet at."""
    for port in random.Random().sample(_PORTS, 50):  # its own generator: seeded tests repeat
        with socket.socket() as probe, contextlib.suppress(OSError):
            probe.bind(("127.0.0.1", port))
            return port
    raise LaunchError(f"no free TCP port among 50 tried in {_PORTS.start}-{_PORTS.stop - 1}")


def _check_nprocs(nprocs: int) -> None:
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive integer, got {nprocs!r}")


_PR_SET_PDEATHSIG = 1  # prctl's option number, from <linux/prctl.h>
# Looked up once, here: a child between fork and exec must not load symbols (a lock another
# thread of the parent held at the fork would never be released in the child).
_PRCTL = ctypes.CDLL(None).prctl if sys.platform == "linux" else None


_PR_SET_CHILD_SUBREAPER = 36  # prctl's option number, from <linux/prctl.h>


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
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
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
                              master_listen_fd=listener.fileno() if serves else None)  # fmt: skip
        if not serves:
            listener.close()
        dist.init_process_group(backend, store=store, rank=rank, world_size=nprocs,
                                timeout=timedelta(seconds=timeout_s))  # fmt: skip
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


class _Lines:
    """Collects a process's output bytes, prints whole lines with `prefix` in front (unless
    `echo` is False) and keeps them (without it) in `lines`. Each line that `counts` accepts
    moves `bar` (a progress bar, or None) one on and shows there."""

    def __init__(self, prefix: str = "", bar=None, echo: bool = True,
                 counts: Callable[[str], bool] = lambda line: True):  # fmt: skip
        self.prefix, self.partial, self.lines = prefix, b"", []
        self.bar, self.echo, self.counts = bar, echo, counts

    def feed(self, data: bytes) -> None:
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            self.lines.append(line.decode(errors="replace") + "\n")
            if self.echo:
                print(self.prefix + self.lines[-1], end="", flush=True)
            if self.bar is not None and self.counts(self.lines[-1]):
                self.bar.set_postfix_str(self.lines[-1].strip()[-60:], refresh=False)
                self.bar.update()

    def close(self) -> None:
        if self.partial:
            self.feed(b"\n")


def _progress_bar(progress: str | None, lines: int | None):
    """A bar that counts a job's output lines (`lines`: how many it will print, if known), or
    None when no progress was asked for. A bar, not the lines alone: rank 0 may print nothing
    for seconds, and the bar's clock shows the job is still running."""
    return None if progress is None else tqdm(desc=progress, total=lines, unit="line")


def _describe_exit(code: int | None) -> str:
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
    _check_nprocs(nprocs)
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
            )  # fmt: skip
            process.start()
            os.close(out_write)  # the parent keeps only the reading ends
            result_write.close()
            ranks.append((process, out_read, result_read))
    bar = _progress_bar(progress, progress_lines)
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
        printers[rank] = _Lines(f"[rank {rank}] ", bar if rank == 0 else None)
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
                            f"rank {rank} {_describe_exit(process.exitcode)} before it finished"
                        )
                        stop_at = min(stop_at, time.monotonic() + GRACE_S)
    finally:
        for rank, (process, _, _) in enumerate(ranks):
            if rank not in exited:
                _stop_rank(process)
    for rank, (_, out_read, _) in enumerate(ranks):
        _drain(out_read, printers[rank])
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


def _drain(fd: int, printer: _Lines) -> None:
    """Print what a rank wrote just before it ended."""
    os.set_blocking(fd, False)
    with contextlib.suppress(BlockingIOError):
        while data := os.read(fd, 1 << 16):
            printer.feed(data)
    printer.close()


def torchrun_command(
    script: str | Path,
    nprocs: int = 2,
    script_args: Sequence[str] = (),
    module: bool = False,
    log_dir: str | Path | None = None,
    torchrun_args: Sequence[str] = (),
) -> list[str]:
    """The `torchrun` command line for one machine (`--standalone`: a rendezvous on localhost);
    `torchrun_args` go to torchrun itself (e.g. `["--max-restarts", "1"]`).

    `python -m torch.distributed.run` is torchrun itself; it is used so that the torchrun of
    this Python runs, whatever `torchrun` is first on PATH.
    """
    _check_nprocs(nprocs)
    target = ["-m", str(script)] if module else [str(script)]
    logs = [f"--log-dir={log_dir}"] if log_dir else []
    # --tee=3: each rank's stdout and stderr reach the console, prefixed with its rank.
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={nprocs}", "--tee=3", *logs, *map(str, torchrun_args), *target,
            *map(str, script_args)]  # fmt: skip


def deepspeed_command(
    script: str | Path,
    nprocs: int = 2,
    script_args: Sequence[str] = (),
    module: bool = False,
    hostfile: str | Path | None = None,
    node_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
) -> list[str]:
    """The command line of DeepSpeed's launcher (`deepspeed`) for `nprocs` processes per machine.

    Without a hostfile it starts them on this machine. `--num_gpus` is always given: without it,
    DeepSpeed's CPU accelerator starts one process per NUMA node (usually one in all).
    With a hostfile (`write_hostfile`) it starts every node's processes itself over ssh (pdsh),
    or, given `node_rank`, only this node's (`--no_ssh`): run it on each node, with the same
    hostfile, master_addr and port. `--num_gpus` then replaces the hostfile's slot counts.

    Each process gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as under
    torchrun, CROSS_RANK (its node), and `--local_rank=L` appended to its arguments (measured,
    deepspeed 0.19.8). It leaves OMP_NUM_THREADS alone unless told --bind_cores_to_rank, which
    pins each rank to its share of the cores through `numactl` (it fails where that is missing).
    `python -m deepspeed.launcher.runner` is `deepspeed` itself, run by this Python.
    """
    _check_nprocs(nprocs)
    flags = [f"--num_gpus={nprocs}"]
    if hostfile is None:
        if node_rank is not None or master_addr is not None:
            raise ValueError("node_rank and master_addr place this node among others: name the "
                             "nodes in a hostfile (write_hostfile) and pass hostfile=")  # fmt: skip
    else:
        flags.append(f"--hostfile={hostfile}")
        if node_rank is not None:
            _check_node_rank(hostfile, node_rank, master_addr)
            flags += ["--no_ssh", f"--node_rank={node_rank}"]
        if master_addr is not None:
            # Without it, DeepSpeed asks the first host for its address over ssh.
            flags.append(f"--master_addr={master_addr}")
    if master_port is not None:
        flags.append(f"--master_port={master_port}")
    if module:
        flags.append("--module")
    return [sys.executable, "-m", "deepspeed.launcher.runner", *flags, str(script),
            *map(str, script_args)]  # fmt: skip


def _check_node_rank(hostfile: str | Path, node_rank: int, master_addr: str | None) -> None:
    if master_addr is None:
        raise ValueError("each node started on its own (node_rank) must be told where node 0 "
                         "listens: pass master_addr (node 0's address)")  # fmt: skip
    if not Path(hostfile).is_file():
        raise FileNotFoundError(f"no hostfile at {hostfile}: write it with write_hostfile")
    hosts = [line for line in Path(hostfile).read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]  # fmt: skip
    if not isinstance(node_rank, int) or not 0 <= node_rank < len(hosts):
        raise ValueError(f"node_rank {node_rank!r}: {hostfile} names {len(hosts)} node(s), "
                         f"numbered 0 to {len(hosts) - 1} in its order")  # fmt: skip


def write_hostfile(path: str | Path, hosts: Sequence[str], slots: int) -> Path:
    """Write a hostfile (MPI's format, which DeepSpeed reads): one `host slots=N` line per node,
    the first line node 0. Returns the path."""
    if isinstance(hosts, str) or not hosts:
        raise ValueError(f"hosts must be a list of host names, got {hosts!r}")
    for host in hosts:
        if not isinstance(host, str) or not host or any(c.isspace() for c in host):
            raise ValueError(f"host {host!r}: a name or address, without spaces")
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"hosts {list(hosts)} name a node twice (DeepSpeed refuses that)")
    if not isinstance(slots, int) or slots < 1:
        raise ValueError(f"slots must be a positive integer (processes per node), got {slots!r}")
    path = Path(path)
    write_atomically(path, "".join(f"{host} slots={slots}\n" for host in hosts).encode())
    return path


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
                                       torchrun_args=torchrun_args)  # fmt: skip
        else:
            if torchrun_args:
                raise ValueError("torchrun_args are for launcher='torchrun'")
            # DeepSpeed's default port is torchrun's (29500): another job may hold it.
            command = deepspeed_command(script, nprocs, script_args, module,
                                        master_port=free_port())  # fmt: skip
            if not torch.cuda.is_available():
                child_env.setdefault("DS_ACCELERATOR", "cpu")  # named: no "no GPU found" warning
        # SIGTERM, not SIGKILL: torchrun and DeepSpeed's launcher stop their ranks on SIGTERM.
        die_with_us = functools.partial(_die_with_parent, os.getpid(), signal.SIGTERM)
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   env=child_env, preexec_fn=die_with_us)  # fmt: skip
        bar = _progress_bar(progress, progress_lines)
        # torchrun prefixes a rank's lines with "[default<rank>]:"; its own lines have none.
        printer = _Lines(bar=bar, counts=lambda line: not line.startswith("[default")
                         or line.startswith("[default0]"))  # fmt: skip
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
            _drain(process.stdout.fileno(), printer)
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
            f"{launcher} {_describe_exit(process.returncode)} ({' '.join(command[3:])}).\n"
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
    bar = _progress_bar(progress, progress_lines)
    printer = _Lines(bar=bar, echo=False)
    finished = False
    with _adopting_orphans() as gained:
        process = subprocess.Popen(list(command), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, env=env,
                                   preexec_fn=die_with_us)  # fmt: skip
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
            _drain(process.stdout.fileno(), printer)
            process.stdout.close()
            if bar is not None:
                bar.close()
    tail = "".join(printer.lines[-25:])
    if not finished:
        raise LaunchError(f"{' '.join(command)} did not finish within {timeout_s:g} s; it was "
                          f"stopped. Its last lines:\n{tail}")  # fmt: skip
    if process.returncode != 0:
        raise LaunchError(f"{' '.join(command)} {_describe_exit(process.returncode)}. Its last "
                          f"lines:\n{tail}")  # fmt: skip
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
            if (process.info["environ"] or {}).get(JOB_TAG) == tag]  # fmt: skip


def _ranks_of(processes: list[psutil.Process], launcher_pid: int) -> list[int]:
    """The ranks among `processes`: the launchers give each rank its RANK variable."""
    ranks = {process.info["environ"].get("RANK") for process in processes
             if process.pid != launcher_pid}  # fmt: skip
    return sorted(int(rank) for rank in ranks if rank is not None and rank.isdigit())


def _stop_job(tag: str) -> None:
    """SIGKILL every process of the job, again until none is left (one may start another)."""
    while processes := _job_processes(tag):
        # Short: a killed orphan stays a zombie until its new parent reaps it; the scan skips it.
        _stop_all(processes, wait_s=1)


def _stream(fd: int, printer: _Lines, timeout_s: float,
            process: subprocess.Popen | None = None) -> bool:  # fmt: skip
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
