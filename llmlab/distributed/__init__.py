"""Training on several processes: process groups, launching, and the parallel strategies.

One concern per module:
- `groups`: who am I (rank, world size), and joining/leaving the process group safely.
- `launch`: start N processes from a notebook, a test or a terminal, with their output shown.
"""

from llmlab.distributed.groups import (
    DistInfo,
    default_backend,
    dist_info,
    leave_process_group,
    process_group,
)
from llmlab.distributed.launch import LaunchError, launch, run_script, torchrun_command

__all__ = [
    "DistInfo",
    "LaunchError",
    "launch",
    "run_script",
    "torchrun_command",
    "default_backend",
    "dist_info",
    "leave_process_group",
    "process_group",
]
