"""The folder of the stand-ins for `srun` and `scontrol`: what goes first on PATH."""

from pathlib import Path

SLURM_STAND_INS = Path(__file__).resolve().parent
