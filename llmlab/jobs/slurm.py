"""A SLURM batch script that trains on several nodes: one torchrun per node, meeting at the first.

`sbatch job.sbatch` asks SLURM for the nodes; the script then runs on the first of them. There it
starts one task per node with `srun`, and each task is a `torchrun` that starts one process per
GPU of its node. The torchruns find each other through a c10d rendezvous hosted on the first
node, so no rank is fixed in advance: `--node_rank` is decided at the meeting.

Flags as documented by SLURM (sbatch: --nodes, --ntasks-per-node, --gpus-per-node,
--cpus-per-task, --time, --job-name, --output with %x = job name and %j = job id; srun:
--kill-on-bad-exit) and by torchrun (--nnodes, --nproc_per_node, --rdzv_backend c10d,
--rdzv_endpoint host:port, --rdzv_id).
"""

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from llmlab.files import write_atomically

# The rendezvous port on the first node; torchrun documents 29400 as its c10d default, 29500 is
# the port torch.distributed uses elsewhere: any free port works if every node uses the same.
RENDEZVOUS_PORT = 29500
# SLURM's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}")


def sbatch_script(
    script: str | Path,
    nodes: int,
    gpus_per_node: int,
    script_args: Sequence[str] = (),
    job_name: str = "llmlab",
    time: str = "01:00:00",
    cpus_per_task: int | None = None,
    output: str = "%x-%j.out",
    port: int = RENDEZVOUS_PORT,
    torchrun: str = "torchrun",
) -> str:
    """The text of an sbatch script running `script` on `nodes` x `gpus_per_node` processes.

    `cpus_per_task` is the CPU cores of a whole node's task (default 8 per GPU, to feed each
    GPU's data loader); each process gets an equal share as OMP_NUM_THREADS. `torchrun` is the
    command that starts it (e.g. "python -m torch.distributed.run" to pin the Python).
    An argument holding `$` is double-quoted, so the job's variables expand in it
    ("runs/$SLURM_JOB_ID"); any other is quoted as it stands.
    """
    cpus = 8 * gpus_per_node if cpus_per_task is None else cpus_per_task
    _check(nodes, gpus_per_node, cpus, job_name, time, port)
    command = [*shlex.split(torchrun), "--nnodes", "$SLURM_NNODES",
               "--nproc_per_node", str(gpus_per_node), "--rdzv_backend", "c10d",
               "--rdzv_endpoint", f"$head_node:{port}", "--rdzv_id", "$SLURM_JOB_ID",
               str(script), *map(str, script_args)]
    return f"""#!/bin/bash
#SBATCH --job-name={job_name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --cpus-per-task={cpus}
#SBATCH --time={time}
#SBATCH --output={output}
# One task per node: it is torchrun, which starts that node's {gpus_per_node} training processes.
set -eu

# The first node hosts the rendezvous; scontrol expands SLURM's compressed list (gpu[01-04]).
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)

export NCCL_DEBUG=WARN  # INFO prints every ring and channel NCCL builds: use it to debug
# NCCL picks a network interface by itself; if the nodes cannot reach each other, name the one
# that connects them (see `ip addr`), for NCCL and for gloo:
# export NCCL_SOCKET_IFNAME=ib0 GLOO_SOCKET_IFNAME=ib0
export OMP_NUM_THREADS={max(1, cpus // gpus_per_node)}  # each process's share of the cores

echo "job $SLURM_JOB_ID: $SLURM_NNODES nodes x {gpus_per_node} processes, rendezvous at \
$head_node:{port}"
# --kill-on-bad-exit: one node failing ends the job instead of leaving the others waiting.
srun --kill-on-bad-exit=1 {" ".join(_quote(word) for word in command)}
"""


def write_sbatch(path: str | Path, script: str | Path, nodes: int, gpus_per_node: int,
                 **options) -> Path:
    """Write `sbatch_script(...)` to `path` (submit it with `sbatch path`); return the path."""
    text = sbatch_script(script, nodes, gpus_per_node, **options)
    write_atomically(path, text.encode())
    return Path(path)


def _quote(word: str) -> str:
    # The script's own variables must expand in the job, so words holding them are double-quoted.
    if "$" in word:
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return shlex.quote(word)


def _check(nodes, gpus_per_node, cpus, job_name, time, port) -> None:
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node),
                        ("cpus_per_task", cpus)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    if cpus < gpus_per_node:
        raise ValueError(f"cpus_per_task={cpus} gives {gpus_per_node} processes less than one "
                         "core each: ask for at least one core per GPU")
    if not re.fullmatch(r"[\w.-]+", job_name):
        raise ValueError(f"job name {job_name!r}: use letters, digits, '.', '_' or '-' only")
    if not _TIME.fullmatch(time):
        raise ValueError(f"time {time!r} is not a SLURM time: use minutes, HH:MM:SS or "
                         "D-HH:MM:SS (e.g. '02:00:00' or '1-00:00:00')")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port {port!r} is not a TCP port (1-65535)")
