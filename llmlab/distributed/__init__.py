"""What runs on the ranks: process groups, launching, the parallel strategies, and (in
`harness/`) the checks that each one trains like one process. (Job files, launchers' command
lines and operations tooling: llmlab.jobs.)

One concern per module:
- `groups`: who am I (rank, world size), and joining/leaving the process group safely.
- `launcher_env`: where this process stands, from torchrun's variables or srun's.
- `launch`: start N ranks from a notebook, a test or a terminal, with their output shown.
  (torchrun's and DeepSpeed's command lines, and running them: llmlab.jobs.)
- `data_parallel`: DDP, ZeRO-1 and FSDP2 wrappers, optimizers and DDP communication hooks.
- `mesh`: every parallel group read off one rank grid (llmlab.scale.layout's rank order).
- `tensor_parallel`: Megatron-style tensor parallelism, by hand and by plan.
- `context_parallel`: one sequence split over ranks: ring attention (contiguous and zig-zag
  splits), Ulysses (all-to-all to heads), and the work each split gives each rank.
- `expert_parallel`: an MoE layer's experts split over ranks, tokens sent to them by all-to-all.
- `deepspeed_config`: DeepSpeed's JSON config from a TrainingSetup (each rank's DeepSpeed engine
  is built from it).
- `stragglers`: per-rank step times gathered, and the ranks slower than the median flagged.
- `harness/`: each strategy on a few ranks against one process, with its bytes, memory and idle
  time measured (the labs' and benchmarks' runs, never the trainer's).
"""

from llmlab.distributed.groups import (
    DistInfo,
    default_backend,
    dist_info,
    leave_process_group,
    process_group,
)
from llmlab.distributed.launch import LaunchError, launch
from llmlab.distributed.launcher_env import LauncherEnv, launcher_env

__all__ = [
    "DistInfo",
    "LaunchError",
    "LauncherEnv",
    "launcher_env",
    "launch",
    "default_backend",
    "dist_info",
    "leave_process_group",
    "process_group",
]
