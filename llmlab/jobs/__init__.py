"""What surrounds a training job and never runs inside it: launch files, the job's environment,
and what to read when it goes wrong. Nothing here imports the trainer (llmlab.train).

One concern per module:
- `commands`: the command lines of torchrun and of DeepSpeed's launcher, a hostfile, a free port.
- `processes`: run a job's command with its output shown; stop every process it started.
- `slurm`: an sbatch script for N nodes x G GPUs (srun starts one torchrun per node).
- `accelerate_config`: a config for `accelerate launch` that really starts N processes.
- `accelerate_notebook`: Accelerate's `notebook_launcher` made to start one group on a CPU.
- `megatron`: the course's names as Megatron-LM arguments, and a command line.
- `launchers`: every launcher side by side: what it starts, where ranks come from, our helpers.
- `nccl_env`: the NCCL/gloo environment variables explained; the doctor's checks of them.
- `dcgm`: DCGM fields for the course's GPU readings; running dcgm-exporter beside a job.
- `hangs`: which rank never reached which collective (flight records compared); debug settings.
"""

from llmlab.jobs.commands import deepspeed_command, free_port, torchrun_command, write_hostfile
from llmlab.jobs.processes import kill_process_tree, run_command, run_script
from llmlab.jobs.slurm import sbatch_script, write_sbatch

__all__ = [
    "torchrun_command",
    "deepspeed_command",
    "write_hostfile",
    "free_port",
    "run_script",
    "run_command",
    "kill_process_tree",
    "sbatch_script",
    "write_sbatch",
]
