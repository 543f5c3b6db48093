"""The Accelerate config llmlab writes, and what `accelerate launch` starts with it on this CPU."""

import json
import re
import sys

import pytest
import torch
from helpers import WORKERS
from helpers.launch import job_env, run

from llmlab.jobs.accelerate_config import accelerate_config, write_accelerate_config

WORKER = WORKERS / "accelerate_worker.py"


def test_the_config_launches_through_torchrun():
    config = accelerate_config(4, mixed_precision="bf16")
    # MULTI_GPU is the type that makes `accelerate launch` use torchrun (MULTI_CPU: one process).
    assert config["distributed_type"] == "MULTI_GPU" and config["num_processes"] == 4
    assert (config["num_machines"], config["mixed_precision"]) == (1, "bf16")


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [((1,), {}, "num_processes must be 2 or more"), ((2.0,), {}, "num_processes must be 2"),
     ((2,), {"mixed_precision": "fp8"}, "mixed_precision 'fp8'"),
     ((2,), {"port": -1}, "port -1 is not a TCP port")],
)
def test_wrong_options_are_errors(args, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        accelerate_config(*args, **options)


def test_the_file_must_be_json(tmp_path):
    with pytest.raises(ValueError, match=r"name it \*\.json"):
        write_accelerate_config(tmp_path / "config.yaml", 2)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="measures what happens without a GPU")
def test_accelerate_launch_with_the_config_starts_two_processes_in_one_group(tmp_path):
    config = write_accelerate_config(tmp_path / "accelerate.json", 2)
    assert json.loads(config.read_text())["num_processes"] == 2
    output = run([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                  str(config), str(WORKER)], job_env())
    lines = sorted(re.findall(r"accelerate rank=(\d) world=(\d) type=(\w+) sum=(\d+)", output))
    assert lines == [("0", "2", "MULTI_CPU", "3"), ("1", "2", "MULTI_CPU", "3")], output
