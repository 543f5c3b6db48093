"""Run by tests/jobs/test_accelerate_config.py under `accelerate launch`: one all-reduce, one line.

Each process prints `accelerate rank=R world=W type=T sum=S`; the sum of rank+1 over the ranks
proves they formed one group.
"""

import os

import torch
import torch.distributed as dist
from accelerate import Accelerator

if __name__ == "__main__":
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())  # see accelerate_config
    total = torch.tensor([accelerator.process_index + 1.0], device=accelerator.device)
    if accelerator.num_processes > 1:
        dist.all_reduce(total)
    line = (f"accelerate rank={accelerator.process_index} world={accelerator.num_processes} "
            f"type={accelerator.distributed_type.value} sum={total.item():g}\n")
    os.write(1, line.encode())  # one write: the ranks share one pipe, lines must not mix
    accelerator.end_training()  # destroys the process group
