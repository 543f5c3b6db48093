"""llmlab switches Triton to its interpreter where there is no NVIDIA driver, before anything can
import Triton, and the kernels refuse what the interpreter cannot run, saying what to do."""

import os
import subprocess
import sys

import pytest
import torch

import llmlab.kernels.triton_mode as triton_mode


def test_without_a_driver_the_interpreter_is_chosen(monkeypatch):
    monkeypatch.setattr(triton_mode, "_cuda_driver_present", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    triton_mode.use_interpreter_without_driver()
    assert triton_mode.interpreted()


def test_a_users_own_choice_wins(monkeypatch):
    monkeypatch.setattr(triton_mode, "_cuda_driver_present", lambda: False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    triton_mode.use_interpreter_without_driver()
    assert not triton_mode.interpreted()


def test_with_a_driver_nothing_is_set(monkeypatch):
    monkeypatch.setattr(triton_mode, "_cuda_driver_present", lambda: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    triton_mode.use_interpreter_without_driver()
    assert not triton_mode.interpreted()


def test_llmlab_start_up_imports_neither_torch_nor_triton():
    # The switch must come before Triton's import, so llmlab's start-up must not import it.
    code = "import sys, llmlab; print('torch' in sys.modules, 'triton' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["False", "False"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="what happens without a GPU")
def test_without_a_gpu_or_the_interpreter_the_kernels_say_how_to_run(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="no CUDA device and Triton's interpreter is off"):
        triton_mode.check_input("x", torch.zeros(2))


@pytest.mark.skipif(triton_mode._cuda_driver_present(), reason="llmlab's switch is for no driver")
def test_an_interpreter_switched_on_after_triton_was_imported_is_named():
    # What a notebook that imports triton before llmlab gets, in a fresh process.
    code = ("import triton, torch, llmlab\n"
            "from llmlab.kernels.softmax import softmax_forward\n"
            "softmax_forward(torch.zeros(2, 3))")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "Triton was imported before its interpreter was switched on" in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's rules")
def test_the_interpreter_takes_tensors_on_the_cpu_only():
    with pytest.raises(ValueError, match=r"q is on meta; the kernels run on cpu here"):
        triton_mode.check_input("q", torch.zeros(2, device="meta"))
    triton_mode.check_input("x", torch.zeros(2))
