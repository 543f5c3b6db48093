"""Run by the launcher tests (under torchrun, srun, or both): join the group, all-reduce, report.

Each rank prints one line `joined rank=R local=L node=N world=W sum=S launcher=...` that the
tests parse; the sum of rank+1 over all ranks proves every rank took part in one collective.
"""

import os

import torch
import torch.distributed as dist

from llmlab.distributed import process_group
from llmlab.distributed.launcher_env import launcher_env

if __name__ == "__main__":
    place = launcher_env(os.environ)  # read before process_group exports torchrun's names
    with process_group("gloo") as info:
        total = torch.tensor([float(info.rank + 1)])
        if info.distributed:  # an elastic run may end up with one node of one process
            dist.all_reduce(total)
        line = (f"joined rank={info.rank} local={info.local_rank} node={place.node_rank} "
                f"world={info.world_size} sum={total.item():g} launcher={place.launcher}\n")
        os.write(1, line.encode())  # one write: the ranks share one pipe, lines must not mix
