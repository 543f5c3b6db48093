"""Two "nodes" on one machine without SLURM: one torchrun per node, meeting at 127.0.0.1.

This is how a multi-node launch is rehearsed before renting nodes: each torchrun is told the
number of nodes and where the rendezvous is; the rendezvous numbers the nodes. With
`--nnodes MIN:MAX` the job is elastic: it starts once MIN nodes are in (after a last call for
latecomers), and a node that is missing does not stop it.
"""

import subprocess
import sys

import pytest
from helpers.launch import WORKER, job_env, joined, run

from llmlab.jobs.commands import free_port


def node_command(nnodes: str, node_rank: int, port: int, last_call_s: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", nnodes,
            "--node_rank", str(node_rank), "--nproc_per_node", "1",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
            "--rdzv_id", "two-nodes", "--rdzv_conf", f"last_call_timeout={last_call_s}",
            str(WORKER)]


def run_nodes(nnodes: str, count: int, last_call_s: int = 30) -> str:
    """Start `count` torchruns at once (the nodes), wait for all; return their output."""
    port, env = free_port(), job_env()
    others = [subprocess.Popen(node_command(nnodes, i, port, last_call_s), env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for i in range(1, count)]
    try:
        output = run(node_command(nnodes, 0, port, last_call_s), env)
        for node in others:
            more, _ = node.communicate(timeout=60)
            assert node.returncode == 0, more
            output += more
    finally:
        for node in others:
            node.kill()
            node.wait()
    return output


@pytest.mark.slow
def test_two_torchruns_with_two_nodes_form_one_world():
    assert joined(run_nodes("2", count=2)) == [(0, 0, 0, 2, 3), (1, 0, 1, 2, 3)]


@pytest.mark.slow
def test_elastic_membership_runs_with_the_nodes_that_came():
    # Both came: the rendezvous closes as soon as the maximum is in, with no last-call wait.
    assert joined(run_nodes("1:2", count=2)) == [(0, 0, 0, 2, 3), (1, 0, 1, 2, 3)]
    # One came: after the last call (1 s here, 30 s by default) it runs alone, a world of 1.
    assert joined(run_nodes("1:2", count=1, last_call_s=1)) == [(0, 0, 0, 1, 1)]
