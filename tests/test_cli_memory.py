"""`llmlab estimate-memory`: the itemised table and the GPUs it fits; bad arguments exit 2."""

import pytest

from llmlab import cli

COMMAND = ["estimate-memory", "--model", "llama-7b", "--dtype", "bf16", "--optimizer", "adamw",
           "--batch", "8", "--seq", "2048", "--zero", "3", "--gpus", "8"]


def test_prints_the_itemised_table_and_which_gpus_it_fits(capsys):
    assert cli.main(COMMAND) == 0
    out = capsys.readouterr().out
    assert "llama-7b: 6.738B parameters (6.476B non-embedding)" in out
    assert "bf16 mixed precision, bf16 gradients, adamw" in out and "8 GPUs, ZeRO-3" in out
    for item in ("weights", "master weights", "optimizer states", "block activations",
                 "gathered blocks", "peak, at the start of backward", "total per GPU"):
        assert item in out
    assert "llama-7b |  117.6 | no    | no    | no    | no    | no    | yes" in out
    assert "141 GB: H200" in out


def test_checkpointing_brings_it_down_to_a_40_gb_gpu(capsys):
    assert cli.main([*COMMAND, "--checkpointing"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("llama-7b ")]
    cells = [cell.strip() for cell in row.split("|")]
    assert cells[1:] == ["24.2", "no", "no", "yes", "yes", "yes", "yes"]


def test_a_set_up_too_big_for_80_gb_gpus_gets_the_out_of_memory_advice(capsys):
    assert cli.main(COMMAND) == 0
    out = capsys.readouterr().out
    advice = out[out.index("Too big for the 80 GB GPUs (A100 SXM 80GB, H100 PCIe, H100 SXM).") :]
    assert "Options for a GPU with 80.0 GB (estimated by llmlab.memory):" in advice
    assert "micro-batch 4 x 2 accumulation steps: 67.1 GB, fits." in advice
    assert "activation checkpointing: 24.2 GB, fits." in advice


def test_context_parallel_and_a_mixture_of_experts_from_the_command_line(capsys):
    assert cli.main(["estimate-memory", "--model", "llama-7b", "--seq", "4096", "--gpus", "8",
                     "--cp", "4", "--zero", "1"]) == 0
    out = capsys.readouterr().out
    assert "context parallel 4" in out
    assert "block activations           |  6.107 |" in out  # 32 x 1024 x 186,368 bytes
    assert cli.main(["estimate-memory", "--model", "mixtral-8x7b", "--seq", "4096", "--gpus",
                     "8", "--ep", "8"]) == 0
    out = capsys.readouterr().out
    assert "46.703B parameters (46.441B non-embedding, 12.880B active)" in out
    assert "expert parallel 8" in out and "weights" in out and "LoRA" not in out


@pytest.mark.parametrize("option", ["--seq", "--lora-rank"])
def test_zero_is_the_documented_default_and_accepted(option, capsys):
    assert cli.main(["estimate-memory", "--model", "tiny", option, "0"]) == 0
    assert "total per GPU" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--model", "llama-8b"], "unknown model preset 'llama-8b': the presets are tiny"),
        (["--dtype", "fp8"], "unknown dtype 'fp8'"),
        (["--optimizer", "lion"], "unknown optimizer 'lion'"),
        (["--batch", "0"], "must be a positive integer"),
        (["--batch", "two"], "argument --batch: must be a positive integer, got 'two'"),
        (["--zero", "4"], "invalid choice: 4"),
        (["--gpus", "6", "--tp", "4"], "not a multiple of tensor_parallel"),
        (["--seq", "8192"], "longer than the model's context 4096"),
        (["--weights-4bit", "nf4"], "set lora_rank"),
        (["--gpus", "2", "--ep", "2"], "needs a mixture of experts"),
        (["--gpus", "8", "--cp", "3"], "not a multiple of tensor_parallel x context_parallel"),
        (["--seq", "-1"], "argument --seq: must be 0 or a positive integer, got '-1'"),
        (["--lora-rank", "-4"], "argument --lora-rank: must be 0 or a positive integer, got '-4'"),
        (["--lora-rank", "1e9"], "argument --lora-rank: must be 0 or a positive integer"),
        (["--lora-rank", "1000000000"], "lora_rank=1000000000 is more than 4096, the smallest"),
        (["--lora-rank", "4097"], "a LoRA update of that rank is already a full one"),
        (["--gpus", "1000000000", "--tp", "1000000000"], "must be a number of GPUs from 1 to"),
        (["--gpus", "1048576", "--tp", "1048576"], "more than the model's 32 attention heads"),
        (["--gpus", "24", "--tp", "12"], "does not divide the model's 32 attention heads"),
        (["--gpus", "nan"], "argument --gpus: must be a number of GPUs from 1 to 1048576"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(extra, words, capsys):
    with pytest.raises(SystemExit) as caught:
        cli.main([*COMMAND, *extra])
    assert caught.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # one line, after the usage
    assert error.startswith("llmlab estimate-memory: error:") and words in error
