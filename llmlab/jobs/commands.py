"""The command lines that start a training job on this machine or on several: torchrun's,
DeepSpeed's launcher's and its hostfile, and a free port for the ranks to meet at. Building a
command runs nothing: `llmlab.jobs.processes` runs it.
"""

import contextlib
import random
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from llmlab.distributed.launch import LaunchError, check_nprocs
from llmlab.files import write_atomically

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
    check_nprocs(nprocs)
    target = ["-m", str(script)] if module else [str(script)]
    logs = [f"--log-dir={log_dir}"] if log_dir else []
    # --tee=3: each rank's stdout and stderr reach the console, prefixed with its rank.
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={nprocs}", "--tee=3", *logs, *map(str, torchrun_args), *target,
            *map(str, script_args)]


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
    check_nprocs(nprocs)
    flags = [f"--num_gpus={nprocs}"]
    if hostfile is None:
        if node_rank is not None or master_addr is not None:
            raise ValueError("node_rank and master_addr place this node among others: name the "
                             "nodes in a hostfile (write_hostfile) and pass hostfile=")
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
            *map(str, script_args)]


def _check_node_rank(hostfile: str | Path, node_rank: int, master_addr: str | None) -> None:
    if master_addr is None:
        raise ValueError("each node started on its own (node_rank) must be told where node 0 "
                         "listens: pass master_addr (node 0's address)")
    if not Path(hostfile).is_file():
        raise FileNotFoundError(f"no hostfile at {hostfile}: write it with write_hostfile")
    hosts = [line for line in Path(hostfile).read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    if not isinstance(node_rank, int) or not 0 <= node_rank < len(hosts):
        raise ValueError(f"node_rank {node_rank!r}: {hostfile} names {len(hosts)} node(s), "
                         f"numbered 0 to {len(hosts) - 1} in its order")


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
