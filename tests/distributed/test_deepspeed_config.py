"""The DeepSpeed config llmlab writes from a TrainingSetup: its keys and values, DeepSpeed's own
parser accepting it, and clear errors for set-ups DeepSpeed cannot run as planned."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from llmlab.distributed.deepspeed_config import deepspeed_config, write_deepspeed_config
from llmlab.distributed.harness.deepspeed_run import deepspeed_available
from llmlab.memory import TrainingSetup

needs_deepspeed = pytest.mark.skipif(not deepspeed_available(), reason="deepspeed not installed")
ZERO2_ON_8 = TrainingSetup(batch=4, grad_accumulation=2, dtype="bf16", zero=2, gpus=8)


def test_batch_sizes_agree_with_the_gpus():
    """DeepSpeed refuses a train_batch_size other than micro-batch x accumulation x ranks."""
    config = deepspeed_config(ZERO2_ON_8)
    assert config["train_micro_batch_size_per_gpu"] == 4
    assert config["gradient_accumulation_steps"] == 2
    assert config["train_batch_size"] == 4 * 2 * 8


def test_stage_precision_optimizer_and_clipping_come_from_the_setup():
    config = deepspeed_config(ZERO2_ON_8, lr=1e-4, grad_clip=0.5)
    zero = config["zero_optimization"]
    assert zero["stage"] == 2 and zero["offload_optimizer"] == {"device": "none"}
    assert "offload_param" not in zero  # parameters are sharded only from stage 3
    assert config["bf16"] == {"enabled": True} and config["fp16"]["enabled"] is False
    assert config["gradient_clipping"] == 0.5
    optimizer = config["optimizer"]
    assert optimizer["type"] == "AdamW" and optimizer["params"]["lr"] == 1e-4
    assert optimizer["params"]["torch_adam"] is True  # no compiled DeepSpeed op needed


@pytest.mark.parametrize(
    "changes, expected",
    [({"dtype": "fp32"}, (False, False)), ({"dtype": "fp16"}, (False, True)),
     ({"dtype": "bf16"}, (True, False))],
    ids=["fp32", "fp16", "bf16"],
)
def test_precision_blocks(changes, expected):
    config = deepspeed_config(ZERO2_ON_8.replace(**changes))
    assert (config["bf16"]["enabled"], config["fp16"]["enabled"]) == expected
    assert config["fp16"]["loss_scale"] == 0  # 0 asks DeepSpeed for dynamic loss scaling


def test_zero3_offloads_nothing_and_buckets_follow_the_model_width():
    config = deepspeed_config(ZERO2_ON_8.replace(zero=3), "gpt2-124m")
    zero = config["zero_optimization"]
    assert zero["offload_param"] == {"device": "none"}
    assert zero["reduce_bucket_size"] == 768 * 768
    assert zero["stage3_param_persistence_threshold"] == 10 * 768
    assert zero["stage3_max_reuse_distance"] == 0  # released after use, as FSDP reshards


@pytest.mark.parametrize(
    "optimizer, kind, extra",
    [("adam", "Adam", {"adam_w_mode": False}), ("sgd-momentum", "SGD", {"momentum": 0.9}),
     ("sgd", "SGD", {"momentum": 0.0})],
)
def test_other_optimizers(optimizer, kind, extra):
    config = deepspeed_config(ZERO2_ON_8.replace(optimizer=optimizer))
    assert config["optimizer"]["type"] == kind
    assert extra.items() <= config["optimizer"]["params"].items()
    assert config.get("zero_allow_untested_optimizer", False) == (kind == "SGD")


@needs_deepspeed
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_deepspeed_parses_every_stage(stage):
    """DeepSpeed's own parser forbids unknown ZeRO keys, so a misspelt one fails here."""
    from deepspeed.runtime.config import DeepSpeedConfig

    setup = TrainingSetup(batch=4, grad_accumulation=2, zero=stage)  # one process: no group
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ZeRO on one GPU: warned about below
        config = deepspeed_config(setup, "gpt2-124m")
    parsed = DeepSpeedConfig(config)
    assert parsed.zero_optimization_stage == stage
    assert parsed.train_batch_size == 8 and parsed.gradient_clipping == 1.0
    assert parsed.zero_config.reduce_bucket_size == 768 * 768


def test_written_json_reads_back(tmp_path):
    path = write_deepspeed_config(deepspeed_config(ZERO2_ON_8), tmp_path / "run" / "ds.json")
    assert json.loads(path.read_text()) == deepspeed_config(ZERO2_ON_8)
    assert [p.name for p in path.parent.iterdir()] == ["ds.json"]  # no temporary left behind


@pytest.mark.parametrize(
    "changes, kwargs, message",
    [
        ({"dtype": "fp16"}, {"device": "cpu"}, "cannot train in fp16"),
        ({"master_weights": False}, {}, "master_weights=True"),
        ({"dtype": "bf16", "fp32_grads": True}, {}, "fp32_grads=False"),
        ({"optimizer": "adam-8bit"}, {}, "no DeepSpeed config"),
        ({"tensor_parallel": 2}, {}, "data parallelism and ZeRO only"),
        ({}, {"device": "tpu"}, "unknown device"),
        ({}, {"lr": 0}, "lr > 0"),
    ],
    ids=["fp16-on-cpu", "pure-bf16", "fp32-grads", "8bit-adam", "tensor-parallel", "device",
         "lr"],
)
def test_bad_setups_are_refused_with_the_way_out(changes, kwargs, message):
    with pytest.raises(ValueError, match=message):
        deepspeed_config(ZERO2_ON_8.replace(**changes), **kwargs)


def test_a_stage_outside_0_to_3_is_refused_by_the_setup():
    with pytest.raises(ValueError, match="ZeRO stage 0, 1, 2 or 3"):
        deepspeed_config(TrainingSetup(zero=4))


def test_something_else_than_a_setup_is_refused():
    with pytest.raises(TypeError, match="TrainingSetup"):
        deepspeed_config({"zero": 2})


def test_zero_on_one_gpu_warns_that_nothing_is_sharded():
    with pytest.warns(UserWarning, match="nothing is sharded"):
        deepspeed_config(TrainingSetup(zero=3, gpus=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        deepspeed_config(TrainingSetup(zero=0, gpus=1))  # plain training: nothing to say


@pytest.mark.slow
@needs_deepspeed
def test_importing_deepspeed_after_llmlab_prints_nothing():
    """DeepSpeed warns at import on machines without a GPU; llmlab hides that once."""
    root = str(Path(__file__).resolve().parents[2])  # the repository
    env = {**os.environ, "PYTHONPATH": root, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("DS_ACCELERATOR", None)
    done = subprocess.run([sys.executable, "-c", "import llmlab, deepspeed"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == ""
