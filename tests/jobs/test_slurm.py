"""The sbatch script llmlab writes, and launches across "nodes" that are one machine.

The real runs use stand-ins for srun and scontrol (llmlab/course/stand_ins/) first on PATH: the
job's two hosts are localhost and 127.0.0.1, so two torchruns on this machine meet through the
c10d rendezvous as two nodes would. The script runs under bash with the variables sbatch would set.
"""

import re
import sys

import pytest
from helpers.launch import WORKER, job_env, joined, run

from llmlab.jobs.commands import free_port
from llmlab.jobs.slurm import sbatch_script, write_sbatch

TORCHRUN = f"{sys.executable} -m torch.distributed.run"  # this Python's torchrun


def test_the_script_asks_for_the_layout_and_starts_one_torchrun_per_node():
    text = sbatch_script("train.py", nodes=4, gpus_per_node=8, script_args=["--lr", "3e-4"],
                         job_name="gpt-350m", time="1-00:00:00")
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --cpus-per-task=64", "#SBATCH --time=1-00:00:00",
                 "#SBATCH --job-name=gpt-350m", "#SBATCH --output=%x-%j.out",
                 "export NCCL_DEBUG=WARN", "export OMP_NUM_THREADS=8",
                 "# export NCCL_SOCKET_IFNAME=",
                 'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'):
        assert line in text, line
    srun = text.splitlines()[-1]
    assert srun == ('srun --kill-on-bad-exit=1 torchrun --nnodes "$SLURM_NNODES" '
                    "--nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint "
                    '"$head_node:29500" --rdzv_id "$SLURM_JOB_ID" train.py --lr 3e-4')
    assert text.startswith("#!/bin/bash\n#SBATCH")  # sbatch reads options only before any command


def test_arguments_are_quoted_and_the_jobs_variables_expand_in_them():
    args = ["a b", "runs/$SLURM_JOB_ID", 'say "hi" $USER']
    text = sbatch_script("my train.py", nodes=1, gpus_per_node=1, script_args=args)
    expected = ''''my train.py' 'a b' "runs/$SLURM_JOB_ID" "say \\"hi\\" $USER"'''
    assert text.splitlines()[-1].endswith(expected)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"nodes": 0}, "nodes must be a positive whole number"),
     ({"gpus_per_node": 2.0}, "gpus_per_node must be a positive whole number"),
     ({"cpus_per_task": 4}, "cpus_per_task=4 gives 8 processes less than one core each"),
     ({"time": "2h"}, "time '2h' is not a SLURM time"),
     ({"job_name": "my job"}, "job name 'my job'"),
     ({"port": 70000}, "port 70000 is not a TCP port")],
)
def test_a_wrong_layout_or_option_is_an_error(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        sbatch_script("train.py", **{"nodes": 2, "gpus_per_node": 8, **options})


@pytest.mark.slow
def test_the_sbatch_script_runs_two_nodes_that_meet_at_the_first(tmp_path):
    job = write_sbatch(tmp_path / "job.sbatch", WORKER, nodes=2, gpus_per_node=1,
                       cpus_per_task=1, port=free_port(), torchrun=TORCHRUN)
    # What sbatch would set for a two-node job (SLURM_NNODES, the node list, a job id).
    env = job_env(SLURM_JOB_NODELIST="localhost,127.0.0.1", SLURM_NNODES="2",
                  SLURM_JOB_ID="4242", SLURM_NTASKS_PER_NODE="1")
    output = run(["bash", str(job)], env)
    assert "job 4242: 2 nodes x 1 processes, rendezvous at localhost:" in output
    # Both torchruns joined one world of 2; the rendezvous gave each node its own rank.
    assert joined(output) == [(0, 0, 0, 2, 3), (1, 0, 1, 2, 3)], output
    assert output.count("launcher=torchrun") == 2


@pytest.mark.slow
def test_srun_alone_starts_the_ranks_and_process_group_reads_slurms_variables():
    env = job_env(SLURM_JOB_NODELIST="localhost,127.0.0.1", SLURM_NNODES="2",
                  SLURM_NTASKS_PER_NODE="2", SLURM_JOB_ID="4243",
                  MASTER_PORT=str(free_port()))  # a free port, not the one from the job id
    output = run(["srun", sys.executable, str(WORKER)], env)
    # 2 nodes x 2 tasks: local ranks 0,1 on each node; rank 0 listened on the first host.
    assert joined(output) == [(0, 0, 0, 4, 10), (1, 1, 0, 4, 10), (2, 0, 1, 4, 10),
                              (3, 1, 1, 4, 10)], output
    assert output.count("launcher=slurm") == 4
