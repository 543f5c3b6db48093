"""The folder put first on PATH holds the stand-ins, ready to run (tests/jobs/test_slurm.py runs
a generated sbatch script with them)."""

import os

from llmlab.course.stand_ins import SLURM_STAND_INS


def test_the_folder_holds_srun_and_scontrol_ready_to_run():
    for name in ("srun", "scontrol"):
        assert os.access(SLURM_STAND_INS / name, os.X_OK), name
