"""Lab 09's checks accept correct answers in their several forms and reject likely mistakes,
each with a message that names it. (tests/test_checks.py proves they pass on the solution
notebook and say "not done yet" on the generated stub.)"""

import pytest
import torch

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab09 as check


def fails(check_fn, answer, match):
    with pytest.raises(ExerciseFailed, match=match):
        check_fn(answer)


def stub(*args, **kwargs):
    raise NotImplementedError("the hint")


# ---------------------------------------------------------------- Profiling and rooflines


# ---------------------------------------------------------------- A Triton kernel

# One kernel with a switch per classic mistake: each test turns one on and the check must name it.
triton = pytest.importorskip("triton")
tl = triton.language


@triton.jit
def _softmax_kernel(y_ptr, x_ptr, y_row_stride, x_row_stride, n_cols, BLOCK: tl.constexpr,
                    SUBTRACT_MAX: tl.constexpr, PAD: tl.constexpr, MASK_LOAD: tl.constexpr,
                    MASK_STORE: tl.constexpr):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    if MASK_LOAD:
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=inside, other=PAD)
    else:
        x = tl.load(x_ptr + row * x_row_stride + cols)
    if SUBTRACT_MAX:
        x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    y = numerator / tl.sum(numerator, axis=0)
    if MASK_STORE:
        tl.store(y_ptr + row * y_row_stride + cols, y, mask=inside)
    else:
        tl.store(y_ptr + row * y_row_stride + cols, y)


def softmax_with(subtract_max=True, pad=-float("inf"), mask_load=True, mask_store=True,
                 x_stride=None, out_stride=None, block_factor=1):  # fmt: skip
    """A launcher for `_softmax_kernel`; x_stride="n_cols" or out_stride="n_cols" passes the
    row length where the row stride belongs."""

    def launch(x, out):
        n_cols = x.shape[1]
        _softmax_kernel[(x.shape[0],)](
            out, x, n_cols if out_stride == "n_cols" else out.stride(0),
            n_cols if x_stride == "n_cols" else x.stride(0), n_cols,
            BLOCK=triton.next_power_of_2(n_cols) * block_factor, SUBTRACT_MAX=subtract_max,
            PAD=pad, MASK_LOAD=mask_load, MASK_STORE=mask_store)  # fmt: skip

    return launch


def softmax_by_copies(x, out):
    """Correct another way: contiguous copies in and out, the kernel on those."""
    packed = torch.empty(x.shape)
    softmax_with()(x.contiguous(), packed)
    out.copy_(packed)


@pytest.mark.parametrize("answer", [check.softmax_rows, softmax_with(), softmax_by_copies,
                                    softmax_with(block_factor=2)])  # fmt: skip
def test_softmax_kernel_passes_correct_kernels(answer, capsys):
    assert check.exercise_softmax_kernel(answer) is answer
    assert "PASSED" in capsys.readouterr().out


def test_softmax_kernel_names_a_missing_max_subtraction():
    fails(check.exercise_softmax_kernel, softmax_with(subtract_max=False),
          r"\+-1e4.*exp\(1e4\) overflows.*Subtract the row's maximum")  # fmt: skip


def test_softmax_kernel_names_lanes_loaded_as_zero():
    fails(check.exercise_softmax_kernel, softmax_with(pad=0.0),
          r"5 rows of 37.*loaded as 0.*-inf")  # fmt: skip


def test_softmax_kernel_names_a_load_past_the_row():
    fails(check.exercise_softmax_kernel, softmax_with(mask_load=False, mask_store=True),
          r"5 rows of 37.*read past the end of a row.*mask the load")  # fmt: skip


def test_softmax_kernel_names_a_store_past_the_row():
    fails(check.exercise_softmax_kernel, softmax_with(mask_store=False),
          r"5 rows of 37.*wrote past the end of a row.*Mask the store")  # fmt: skip


def test_softmax_kernel_names_n_cols_as_the_row_stride_of_x():
    fails(check.exercise_softmax_kernel, softmax_with(x_stride="n_cols"),
          r"rows 50 apart in x.*read them 37 apart \(n_cols\): pass x.stride\(0\)")  # fmt: skip


def test_softmax_kernel_names_n_cols_as_the_row_stride_of_out():
    fails(check.exercise_softmax_kernel, softmax_with(out_stride="n_cols"),
          r"40 elements apart.*wrote them 37 apart \(n_cols\): pass out.stride\(0\)")  # fmt: skip


def test_softmax_kernel_names_an_output_never_written():
    def swapped(x, out):  # the pointers in the wrong order: the kernel writes into x
        softmax_with()(out, x)

    fails(check.exercise_softmax_kernel, swapped, r"never written.*order the kernel takes them")


def test_softmax_kernel_not_done_falls_back_to_llmlabs(capsys):
    assert check.exercise_softmax_kernel(stub) is check.softmax_rows
    assert "not done yet" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="what happens without a GPU")
def test_softmax_kernel_without_a_gpu_or_the_interpreter_says_what_to_do(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="Triton's interpreter is off: set TRITON_INTERPRET=1"):
        check.exercise_softmax_kernel(softmax_with())


@triton.jit
def _stub_kernel(y_ptr, x_ptr):
    raise NotImplementedError("the hint")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs a kernel's raise")
def test_softmax_kernel_with_a_stub_for_a_body_is_not_done_yet(capsys):
    def launch(x, out):
        _stub_kernel[(x.shape[0],)](out, x)

    assert check.exercise_softmax_kernel(launch) is check.softmax_rows
    assert "not done yet" in capsys.readouterr().out



# ---------------------------------------------------------------- torch.compile and precision


# ---------------------------------------------------------------- A KV cache and inference


def test_the_lab_names_its_notebook():
    assert check.NOTEBOOK == "09_kernels.ipynb"
