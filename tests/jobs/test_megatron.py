"""The Megatron-LM mapping: flags for a layout, the implied data-parallel degree, bad layouts."""

import pytest

from llmlab.jobs.megatron import (
    MEGATRON_NAMES,
    megatron_args,
    megatron_command,
    megatron_table,
)
from llmlab.memory import TrainingSetup


def _flags(args: list[str]) -> dict[str, str]:
    return dict(arg.split("=", 1) if "=" in arg else (arg, "") for arg in args)


def test_llama_70b_on_64_gpus_with_tp_8_and_pp_4():
    setup = TrainingSetup(batch=1, seq=4096, gpus=64, tensor_parallel=8, zero=1,
                          grad_accumulation=16)  # fmt: skip
    flags = _flags(megatron_args("llama-70b", setup, pipeline_parallel=4, sequence_parallel=True))
    assert flags["--tensor-model-parallel-size"] == "8"
    assert flags["--pipeline-model-parallel-size"] == "4"
    assert flags["--global-batch-size"] == str(1 * 16 * 2)  # dp = 64 / (8 * 4) = 2
    assert flags["--num-query-groups"] == "8" and "--group-query-attention" in flags
    assert flags["--ffn-hidden-size"] == "28672" and flags["--normalization"] == "RMSNorm"
    for flag in ("--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--swiglu",
                 "--untie-embeddings-and-output-weights"):  # fmt: skip
        assert flag in flags
    assert not any("data-parallel" in arg for arg in flags)  # implied by the world size


def test_gpt2_smoke_model_command_runs_on_mock_data():
    command = megatron_command("tiny", TrainingSetup(batch=4, gpus=2, tensor_parallel=2,
                                                     dtype="fp32"))  # fmt: skip
    words = command.replace("\\\n", " ").split()
    assert words[:4] == ["torchrun", "--nproc_per_node=2", "--nnodes=1", "pretrain_gpt.py"]
    flags = _flags(words[4:])
    assert flags["--num-layers"] == "4" and flags["--hidden-size"] == "256"
    assert flags["--vocab-size"] == "2048" and "--mock-data" in flags
    assert "--swiglu" not in flags and "--untie-embeddings-and-output-weights" not in flags
    assert "--bf16" not in flags and "--fp16" not in flags  # fp32


def test_the_table_names_every_flag_the_command_can_use():
    table = megatron_table()
    assert len(table.splitlines()) == 2 + len(MEGATRON_NAMES)  # a header, its rule, the rows
    for flag in ("--tensor-model-parallel-size", "--sequence-parallel", "--micro-batch-size",
                 "--use-distributed-optimizer", "--seq-length"):  # fmt: skip
        assert flag in table


def test_bad_layouts_say_what_is_wrong():
    with pytest.raises(ValueError, match="not a multiple of tp"):
        megatron_args("tiny", TrainingSetup(gpus=4, tensor_parallel=2), pipeline_parallel=3)
    with pytest.raises(ValueError, match="more than the model's 4 attention heads"):
        megatron_args("tiny", TrainingSetup(gpus=8, tensor_parallel=8))
    with pytest.raises(ValueError, match="do not divide 4 layers"):
        megatron_args("tiny", TrainingSetup(gpus=3), pipeline_parallel=3)
    with pytest.raises(ValueError, match="needs tp > 1"):
        megatron_args("tiny", TrainingSetup(gpus=2), sequence_parallel=True)
    with pytest.raises(ValueError, match="ZeRO-3 has no Megatron-LM flag"):
        megatron_args("tiny", TrainingSetup(gpus=2, zero=3))
