import os
import random

import numpy as np
import pytest
import torch

from llmlab.device import (
    THREADS_OVERRIDE,
    TORCH_DTYPES,
    autocast,
    choose_device,
    choose_dtype,
    dtype_name,
    pin_cpu_threads,
    seed_everything,
    training_dtype_for,
)
from llmlab.env import cpu_info

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")


@pytest.mark.parametrize(
    ("capability", "dtype", "scaler"),
    [
        ((6, 1), torch.float32, False),
        ((7, 0), torch.float16, True),
        ((7, 5), torch.float16, True),
        ((8, 0), torch.bfloat16, False),
        ((8, 6), torch.bfloat16, False),
        ((9, 0), torch.bfloat16, False),
    ],
)
def test_cuda_dtype_rule(capability, dtype, scaler):
    choice = training_dtype_for("cuda", capability)
    assert choice.dtype == dtype
    assert choice.use_grad_scaler is scaler
    assert choice.reason


@pytest.mark.parametrize(
    ("fast_bf16", "dtype", "name"), [(True, torch.bfloat16, "bf16"), (False, torch.float32, "fp32")]
)
def test_cpu_dtype_rule(fast_bf16, dtype, name):
    choice = training_dtype_for("cpu", cpu_fast_bf16=fast_bf16)
    assert (choice.dtype, choice.name, choice.use_grad_scaler) == (dtype, name, False)
    assert choice.reason


def test_mps_and_unknown_device_types():
    assert training_dtype_for("mps").dtype == torch.float32
    with pytest.raises(ValueError):
        training_dtype_for("cuda")  # no capability given
    with pytest.raises(ValueError):
        training_dtype_for("tpu")


def test_choose_dtype_on_cpu_follows_the_cpu_flags():
    assert choose_dtype("cpu").dtype == (torch.bfloat16 if cpu_info().fast_bf16 else torch.float32)


@pytest.mark.skipif(
    torch.cuda.is_available() or torch.backends.mps.is_available(), reason="this machine has a GPU"
)
def test_choose_device_falls_back_to_cpu():
    choice = choose_device()
    assert choice.device == torch.device("cpu")
    assert "no CUDA GPU" in choice.reason


def test_choose_device_cpu_on_request():
    assert choose_device("cpu").device == torch.device("cpu")


@needs_no_gpu
def test_choose_device_cuda_without_gpu_raises():
    with pytest.raises(ValueError, match="CUDA"):
        choose_device("cuda")


def test_seed_everything_repeats_random_draws():
    def draws():
        return torch.randn(3), random.random(), np.random.rand(3)

    seed_everything(123)
    first = draws()
    seed_everything(123)
    second = draws()
    assert torch.equal(first[0], second[0])
    assert first[1] == second[1]
    assert np.array_equal(first[2], second[2])


def test_seed_everything_deterministic_switches_on_and_off(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # restored after the test
    seed_everything(0, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    seed_everything(0)
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.fixture
def threads_restored():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_the_thread_count_moves_a_sum_and_pinning_the_cpu_threads_removes_it(threads_restored,
                                                                              monkeypatch):
    monkeypatch.delenv(THREADS_OVERRIDE, raising=False)  # the test command sets it
    x = torch.randn(2**20, generator=torch.Generator().manual_seed(0))
    torch.set_num_threads(1)
    one_thread = x.sum()
    torch.set_num_threads(4)
    assert not torch.equal(x.sum(), one_thread)  # four partial sums round differently
    pin_cpu_threads("cpu")
    assert torch.equal(x.sum(), one_thread)
    torch.set_num_threads(2)
    two_threads = x.sum()
    torch.set_num_threads(4)
    pin_cpu_threads("cpu", threads=2)  # the count fixes the numbers, whatever the cores
    assert torch.equal(x.sum(), two_threads)
    torch.set_num_threads(4)
    pin_cpu_threads("cuda:0")  # a GPU's results do not depend on the host's threads
    assert torch.get_num_threads() == 4
    with pytest.raises(ValueError, match="at least 1"):
        pin_cpu_threads("cpu", threads=0)


def test_the_override_replaces_every_pins_count_and_refuses_what_is_no_count(threads_restored,
                                                                              monkeypatch):
    monkeypatch.setenv(THREADS_OVERRIDE, "1")
    torch.set_num_threads(3)
    pin_cpu_threads("cpu", threads=2)
    assert torch.get_num_threads() == 1
    monkeypatch.setenv(THREADS_OVERRIDE, "")  # set but empty: the notebook's own count
    pin_cpu_threads("cpu", threads=2)
    assert torch.get_num_threads() == 2
    for bad, message in (("two", "whole number"), ("-1", "whole number"), ("0", "at least 1")):
        monkeypatch.setenv(THREADS_OVERRIDE, bad)
        with pytest.raises(ValueError, match=message):
            pin_cpu_threads("cpu", threads=2)
    assert torch.get_num_threads() == 2  # a refused override changes nothing


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_autocast_on_cpu_sets_the_matmul_dtype(dtype):
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with autocast("cpu", dtype):
        assert (a @ b).dtype == dtype


def test_a_cuda_device_on_a_machine_without_one_becomes_the_cpu_with_a_warning(monkeypatch):
    from llmlab.device import device_or_cpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="cuda:0 was asked for .* torchao runs on the CPU"):
        assert device_or_cpu("cuda:0", "torchao") == torch.device("cpu")
    assert device_or_cpu(None, "torchao") == torch.device("cpu")
    assert device_or_cpu("cpu", "torchao") == torch.device("cpu")


def test_dtype_name_reads_the_one_dtype_table_backwards():
    assert [dtype_name(dtype) for dtype in TORCH_DTYPES.values()] == list(TORCH_DTYPES)
    with pytest.raises(ValueError, match="torch.float64 is not a training dtype"):
        dtype_name(torch.float64)
