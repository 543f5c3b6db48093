"""Stand-ins for SLURM's `srun` and `scontrol`, so a generated sbatch script runs on one machine.

Put this folder first on PATH (`SLURM_STAND_INS`), set the variables sbatch would set
(SLURM_JOB_NODELIST with plain host names such as "localhost,127.0.0.1", SLURM_NNODES,
SLURM_JOB_ID, SLURM_NTASKS_PER_NODE) and run the script with bash: `srun` starts each task here
with the variables a real srun gives it; `scontrol` only answers `show hostnames`. Lab 05 and the
launcher tests use them; they are no cluster (no resources, no remote hosts).
"""

from llmlab.course.stand_ins.folder import SLURM_STAND_INS

__all__ = ["SLURM_STAND_INS"]
