"""The Megatron-LM mapping: flags for a layout, the implied data-parallel degree, bad layouts."""

import pytest

from llmlab.jobs.megatron import (
    MEGATRON_NAMES,
    megatron_args,
    megatron_command,
    megatron_table,
)
from llmlab.scale.layout import Parallel


def _flags(args: list[str]) -> dict[str, str]:
    return dict(arg.split("=", 1) if "=" in arg else (arg, "") for arg in args)


def test_llama_70b_on_64_gpus_with_tp_8_and_pp_4():
    parallel = Parallel(dp=2, tp=8, pp=4, zero=1, micro_batch=1, accumulation=16, seq=4096)
    flags = _flags(megatron_args("llama-70b", parallel, sequence_parallel=True))
    assert flags["--tensor-model-parallel-size"] == "8"
    assert flags["--pipeline-model-parallel-size"] == "4"
    assert flags["--global-batch-size"] == str(1 * 16 * 2)  # micro-batch * accumulation * dp
    assert flags["--seq-length"] == "4096" and flags["--micro-batch-size"] == "1"
    assert flags["--num-query-groups"] == "8" and "--group-query-attention" in flags
    assert flags["--ffn-hidden-size"] == "28672" and flags["--normalization"] == "RMSNorm"
    for flag in ("--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--swiglu",
                 "--untie-embeddings-and-output-weights"):
        assert flag in flags
    assert not any("data-parallel" in arg for arg in flags)  # implied by the world size


def test_the_command_starts_dp_tp_pp_processes_on_whole_nodes():
    command = megatron_command("llama-70b", Parallel(dp=2, tp=8, pp=4, zero=1), dtype="fp16")
    words = command.replace("\\\n", " ").split()
    assert words[:3] == ["torchrun", "--nproc_per_node=8", "--nnodes=8"]  # 64 GPUs
    flags = _flags(words[4:])
    assert "--fp16" in flags and "--bf16" not in flags
    assert flags["--seq-length"] == "4096"  # seq 0: the model's context
    with pytest.raises(ValueError, match="12 GPUs do not fill nodes of 8"):
        megatron_command("tiny", Parallel(dp=6, tp=2))


def test_gpt2_smoke_model_command_runs_on_mock_data():
    command = megatron_command("tiny", Parallel(dp=1, tp=2, micro_batch=4), dtype="fp32")
    words = command.replace("\\\n", " ").split()
    assert words[:4] == ["torchrun", "--nproc_per_node=2", "--nnodes=1", "pretrain_gpt.py"]
    flags = _flags(words[4:])
    assert flags["--num-layers"] == "4" and flags["--hidden-size"] == "256"
    assert flags["--vocab-size"] == "2048" and "--mock-data" in flags
    assert flags["--micro-batch-size"] == "4" and flags["--global-batch-size"] == "4"
    assert "--swiglu" not in flags and "--untie-embeddings-and-output-weights" not in flags
    assert "--bf16" not in flags and "--fp16" not in flags  # fp32


def test_the_table_names_every_flag_the_command_can_use():
    table = megatron_table()
    assert len(table.splitlines()) == 2 + len(MEGATRON_NAMES)  # a header, its rule, the rows
    for flag in ("--tensor-model-parallel-size", "--sequence-parallel", "--micro-batch-size",
                 "--use-distributed-optimizer", "--seq-length"):
        assert flag in table


def test_bad_layouts_say_what_is_wrong():
    # A world size that is not a multiple of tp * pp cannot be asked for: Parallel's GPUs are
    # dp * tp * pp (tests/scale/test_layout.py checks it rejects degrees below 1).
    with pytest.raises(ValueError, match="more than the model's 4 attention heads"):
        megatron_args("tiny", Parallel(dp=1, tp=8))
    with pytest.raises(ValueError, match="do not divide 4 layers"):
        megatron_args("tiny", Parallel(dp=1, pp=3))
    with pytest.raises(ValueError, match="needs tp > 1"):
        megatron_args("tiny", Parallel(dp=2), sequence_parallel=True)
    with pytest.raises(ValueError, match="ZeRO-3 has no Megatron-LM flag"):
        megatron_args("tiny", Parallel(dp=2, zero=3))
    with pytest.raises(ValueError, match="unknown dtype 'fp8': use one of"):
        megatron_args("tiny", Parallel(dp=2), dtype="fp8")
