"""Process groups for multi-process training: who am I, and a paired set-up and tear-down.

`torchrun --nproc_per_node N script.py` starts N copies of a script and tells each its place
through environment variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); SLURM's
`srun` alone does it under other names (see `llmlab.distributed.launcher_env`).
"""

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from llmlab.distributed.launcher_env import launcher_env


@dataclass(frozen=True)
class DistInfo:
    rank: int  # this process among all processes
    local_rank: int  # this process on its machine: which GPU it drives
    world_size: int

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, prints and writes checkpoints; the others only compute."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def dist_info() -> DistInfo:
    """This process's place: from the process group when there is one, else a single process."""
    if dist.is_available() and dist.is_initialized():
        local = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
        return DistInfo(dist.get_rank(), local, dist.get_world_size())
    return DistInfo(0, 0, 1)


def default_backend() -> str:
    # NCCL moves GPU tensors over NVLink/InfiniBand; gloo is the CPU (and fallback) backend.
    return "nccl" if torch.cuda.is_available() else "gloo"


@contextmanager
def process_group(backend: str | None = None) -> Iterator[DistInfo]:
    """Join the process group torchrun or srun describes (or run alone without one); always
    leave it.

    Destroying the group at the end matters: a process that exits without it can leave the
    others hanging in a collective, and NCCL warns about leaked resources. Drop DDP-wrapped
    models before the block ends (see `leave_process_group`).
    """
    place = launcher_env(os.environ)
    if place is None or place.world_size == 1:
        yield DistInfo(0, 0, 1)
        return
    # Under srun alone, torchrun's names are set too: env:// reads them, and so does the code
    # (dist_info, libraries) that asks for LOCAL_RANK later.
    os.environ.update(place.torchrun_variables())
    backend = backend or default_backend()
    if backend == "nccl":
        torch.cuda.set_device(place.local_rank)  # one GPU per process
    store = _restart_store()
    if store is None:
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, store=store, rank=place.rank,
                                world_size=place.world_size)
    try:
        yield dist_info()
    except BaseException:
        leave_process_group(wait_for_others=False)  # after an error the others may never come
        raise
    leave_process_group()


def _restart_store() -> dist.Store | None:
    """A store of its own for an attempt torchrun's elastic agent restarted; None otherwise.

    The agent keeps one TCPStore for every attempt (TORCHELASTIC_USE_AGENT_STORE=True), and the
    default group writes the same keys in each (gloo's rank addresses): a restarted rank could
    read the address of a rank that died and fail with "Connection refused" (seen with torch
    2.13). A prefix per attempt keeps each attempt's keys apart.
    """
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if attempt == "0" or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    shared = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    return dist.PrefixStore(f"llmlab/attempt_{attempt}", shared)


def leave_process_group(wait_for_others: bool = True) -> None:
    """Tear down in a safe order: free DDP wrappers, wait for every rank, destroy the group.

    A DDP wrapper holds the group. Freed after the group is destroyed, it drops the group's last
    reference while holding the GIL, and the group's destructor then waits for a gloo thread that
    needs the GIL: the process hangs after training. Freed first, it leaves nothing to wait for.
    """
    gc.collect()  # DDP wrappers sit in reference cycles: free the unreachable ones now
    if wait_for_others:
        dist.barrier()  # every rank's last collective has finished before the group goes
    dist.destroy_process_group()
