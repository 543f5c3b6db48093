"""The OOM helper turns a CUDA out-of-memory error (raised by hand here, on the CPU) into
options ranked by the planner: those that fit first, the least invasive first."""

import pytest
import torch

from llmlab.memory import GB, OutOfMemoryWithAdvice, TrainingSetup, memory_options, oom_advice

SETUP = TrainingSetup(batch=8, seq=2048)  # llama-7b, bf16 mixed precision, AdamW: ~200 GB


def test_an_out_of_memory_error_comes_back_with_ranked_options():
    with pytest.raises(OutOfMemoryWithAdvice) as caught:
        with oom_advice("llama-7b", SETUP, gpu_gb=80):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    message = str(caught.value)
    assert message.startswith("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert "The planner estimates 199.4 GB per GPU" in message
    assert "1. activation checkpointing + 8-bit Adam: 71.1 GB, fits. Cost:" in message
    assert isinstance(caught.value, torch.cuda.OutOfMemoryError)  # old handlers still catch it
    assert isinstance(caught.value.__cause__, torch.cuda.OutOfMemoryError)


def test_options_that_fit_come_first_then_the_rest_by_memory():
    options = memory_options("gpt2-1.5b", SETUP.replace(dtype="fp32", seq=1024, gpus=4), 24 * GB)
    fits = [option.fits(24 * GB) for option in options]
    assert fits[0] and fits == sorted(fits, reverse=True)
    too_big = [option.estimate.total for option in options if not option.fits(24 * GB)]
    assert too_big == sorted(too_big)
    changes = [option.change for option in options]
    assert "ZeRO stage 3 / FSDP full sharding" in changes  # four GPUs: sharding is an option
    assert "bf16 mixed precision" in changes


def test_a_smaller_micro_batch_keeps_the_sequences_per_step():
    options = memory_options("gpt2-124m", TrainingSetup(batch=32, seq=1024), 24 * GB)
    first = options[0]
    assert first.change == "micro-batch 16 x 2 accumulation steps" and first.fits(24 * GB)
    setup = first.estimate.setup
    assert setup.batch * setup.grad_accumulation == 32


def test_nothing_fits_says_what_to_do(capsys):
    with pytest.raises(OutOfMemoryWithAdvice, match="None of these fits: add GPUs"):
        with oom_advice("llama-70b", TrainingSetup(batch=1, seq=4096), gpu_gb=24):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory.")


def test_other_errors_and_success_pass_through():
    with oom_advice("tiny", SETUP.replace(seq=256)):
        pass
    with pytest.raises(KeyError):
        with oom_advice("tiny", SETUP.replace(seq=256), gpu_gb=16):
            raise KeyError("not memory")


def test_muon_is_offered_no_adapters():
    """Muon trains whole matrices: the LoRA and QLoRA levers leave it alone."""
    options = memory_options("llama-7b", SETUP.replace(optimizer="muon"), 80 * GB)
    assert options and not any("LoRA" in option.change for option in options)
    assert all(option.estimate.setup.optimizer == "muon" for option in options)
