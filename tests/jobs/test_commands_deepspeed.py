"""DeepSpeed's launcher (`deepspeed`): the command lines llmlab builds, its hostfile, and real runs
on this machine: two "nodes" started without ssh, and a failing rank. (Two processes on one
machine, training Lab 04's ZeRO-2: tests/distributed/harness/test_deepspeed_run.py.)"""

import subprocess
import sys

import pytest
import torch
from helpers.launch import WORKER, job_env, joined, run

from llmlab.distributed import LaunchError
from llmlab.distributed.harness.deepspeed_run import deepspeed_available
from llmlab.jobs.commands import deepspeed_command, free_port, write_hostfile
from llmlab.jobs.processes import kill_process_tree, run_script

RUNNER = [sys.executable, "-m", "deepspeed.launcher.runner"]
needs_deepspeed = pytest.mark.skipif(not deepspeed_available(), reason="deepspeed not installed")


def test_one_machine_names_the_process_count():
    command = deepspeed_command("train.py", 4, ["--steps", 5], master_port=29600)
    assert command == [*RUNNER, "--num_gpus=4", "--master_port=29600", "train.py", "--steps", "5"]
    assert deepspeed_command("llmlab.x", 2, module=True)[-2:] == ["--module", "llmlab.x"]


def test_one_node_of_several_is_started_without_ssh(tmp_path):
    hostfile = write_hostfile(tmp_path / "hostfile", ["node-a", "node-b"], slots=2)
    assert hostfile.read_text() == "node-a slots=2\nnode-b slots=2\n"
    command = deepspeed_command("train.py", 2, hostfile=hostfile, node_rank=1,
                                master_addr="10.0.0.1")
    assert command[3:] == ["--num_gpus=2", f"--hostfile={hostfile}", "--no_ssh", "--node_rank=1",
                           "--master_addr=10.0.0.1", "train.py"]
    # Without node_rank, DeepSpeed starts every node itself over ssh (pdsh).
    assert "--no_ssh" not in deepspeed_command("train.py", 2, hostfile=hostfile)


@needs_deepspeed
def test_deepspeed_reads_the_hostfile_as_written(tmp_path):
    from deepspeed.launcher.runner import fetch_hostfile

    hostfile = write_hostfile(tmp_path / "hostfile", ["gpu01", "10.0.0.2"], slots=8)
    assert fetch_hostfile(str(hostfile)) == {"gpu01": 8, "10.0.0.2": 8}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [({"nprocs": 0}, ValueError, "nprocs must be a positive integer"),
     ({"node_rank": 0}, ValueError, "name the nodes in a hostfile"),
     ({"hostfile": "HOSTS", "node_rank": 0}, ValueError, "pass master_addr"),
     ({"hostfile": "HOSTS", "node_rank": 2, "master_addr": "a"}, ValueError, "numbered 0 to 1"),
     ({"hostfile": "missing", "node_rank": 0, "master_addr": "a"}, FileNotFoundError,
      "no hostfile")],
)
def test_wrong_commands_are_refused(tmp_path, kwargs, error, message):
    hosts = write_hostfile(tmp_path / "hostfile", ["a", "b"], slots=1)
    if kwargs.get("hostfile") == "HOSTS":
        kwargs["hostfile"] = hosts
    with pytest.raises(error, match=message):
        deepspeed_command("train.py", **{"nprocs": 2, **kwargs})


@pytest.mark.parametrize(
    ("hosts", "slots", "message"),
    [("node-a", 1, "a list of host names"), (["a", "a"], 1, "name a node twice"),
     (["a b"], 1, "without spaces"), (["a"], 0, "slots must be a positive integer")],
)
def test_wrong_hostfiles_are_refused(tmp_path, hosts, slots, message):
    with pytest.raises(ValueError, match=message):
        write_hostfile(tmp_path / "hostfile", hosts, slots)


def ds_env() -> dict[str, str]:
    env = job_env()
    if not torch.cuda.is_available():
        env["DS_ACCELERATOR"] = "cpu"
    return env


@needs_deepspeed
@pytest.mark.slow
def test_two_nodes_started_without_ssh_form_one_world(tmp_path):
    """One launcher per "node", as on a cluster without passwordless ssh: each is told its place
    in the hostfile and node 0's address."""
    hostfile = write_hostfile(tmp_path / "hostfile", ["node-a", "node-b"], slots=1)
    port, env = free_port(), ds_env()

    def node(rank: int) -> list[str]:
        return deepspeed_command(WORKER, 1, hostfile=hostfile, node_rank=rank,
                                 master_addr="127.0.0.1", master_port=port)

    other = subprocess.Popen(node(1), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        output = run(node(0), env)
        more, _ = other.communicate(timeout=60)
        assert other.returncode == 0, more
    finally:
        kill_process_tree(other.pid)  # the launcher, and the processes it started
        other.wait()
    # (rank, local rank, node, world, sum of rank+1): node 1's one process is rank 1.
    assert joined(output + more) == [(0, 0, 0, 2, 3), (1, 0, 1, 2, 3)]


@needs_deepspeed
@pytest.mark.slow
def test_a_failing_rank_fails_the_run(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import os, sys\n"
                      "if os.environ['RANK'] == '1':\n"
                      "    sys.exit('rank 1 gives up')\n")
    with pytest.raises(LaunchError, match="(?s)deepspeed exited with code 1.*rank 1 gives up"):
        run_script(script, nprocs=2, launcher="deepspeed", env=ds_env(), timeout_s=60)


def test_an_unknown_launcher_is_refused(tmp_path):
    with pytest.raises(ValueError, match="launcher 'mpirun'"):
        run_script(tmp_path / "x.py", launcher="mpirun")
