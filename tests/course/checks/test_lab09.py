"""Lab 09's checks accept correct answers in their several forms and reject likely mistakes,
each with a message that names it. (tests/test_checks.py proves they pass on the solution
notebook and say "not done yet" on the generated stub.)"""

import functools
import math

import numpy as np
import pytest
import torch

from llmlab import profiler
from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab09 as check


def fails(check_fn, answer, match):
    with pytest.raises(ExerciseFailed, match=match):
        check_fn(answer)


def stub(*args, **kwargs):
    raise NotImplementedError("the hint")


# ---------------------------------------------------------------- Profiling and rooflines


def cost(name, shape, dtype, *, multiply_add=True, output=True, size=None, moments=True,
         moment_writes=True, unit=1, form=tuple, norm_parameters=True):  # fmt: skip
    """A learner's operator_cost with one switch per likely mistake (defaults: a correct one)."""
    size = size or dtype.itemsize
    if name == "matmul":
        m, k, n = shape
        flops = (2 if multiply_add else 1) * m * k * n
        moved = m * k + k * n + (m * n if output else 0)
    else:
        elements = math.prod(shape)
        flops = profiler.FLOPS_PER_ELEMENT[name] * elements
        if name == "adamw":
            reads = 4 if moments else 2  # parameter, gradient (and the two moments)
            writes = (3 if moments and moment_writes else 1) if output else 0
            moved = (reads + writes) * elements
        else:
            moved = (2 if output else 1) * elements
            if name == "layer_norm" and norm_parameters:
                moved += 2 * shape[-1]
    return form((flops, moved * size * unit))


def test_operator_cost_passes_in_several_forms(capsys):
    check.exercise_operator_cost(cost)
    check.exercise_operator_cost(functools.partial(cost, form=list))
    check.exercise_operator_cost(functools.partial(cost, norm_parameters=False))
    as_tensors = functools.partial(cost, form=lambda pair: tuple(torch.tensor(float(v))
                                                                 for v in pair))  # fmt: skip
    check.exercise_operator_cost(as_tensors)
    check.exercise_operator_cost(functools.partial(cost, form=np.array))
    check.exercise_operator_cost(profiler.operator_cost)
    assert capsys.readouterr().out.count("PASSED") == 6


def test_operator_cost_rejects_a_matmul_counted_as_one_flop_per_term():
    fails(check.exercise_operator_cost, functools.partial(cost, multiply_add=False),
          "multiply and an add")  # fmt: skip


def test_operator_cost_rejects_forgetting_the_write_of_the_output():
    fails(check.exercise_operator_cost, functools.partial(cost, output=False),
          "leaves out writing the result")  # fmt: skip


def test_operator_cost_rejects_fp32_bytes_for_a_bf16_tensor():
    fails(check.exercise_operator_cost, functools.partial(cost, size=4),
          r"4 bytes per number, but torch.bfloat16 takes 2")  # fmt: skip


def test_operator_cost_rejects_adamw_without_its_moments():
    fails(check.exercise_operator_cost, functools.partial(cost, moments=False),
          "only the parameter and its gradient")  # fmt: skip


def test_operator_cost_rejects_adamw_moments_read_but_never_written():
    fails(check.exercise_operator_cost, functools.partial(cost, moment_writes=False),
          "never writes them back")  # fmt: skip


def test_operator_cost_rejects_bits_for_bytes():
    fails(check.exercise_operator_cost, functools.partial(cost, unit=8), "bits, not bytes")


def test_operator_cost_rejects_an_answer_that_is_not_a_pair():
    fails(check.exercise_operator_cost, lambda name, shape, dtype: 12.0, r"return two numbers")


def test_operator_cost_on_the_stub_returns_llmlab_s_version(capsys):
    assert check.exercise_operator_cost(stub) is profiler.operator_cost
    assert "not done yet" in capsys.readouterr().out


# ---------------------------------------------------------------- A Triton kernel


# ---------------------------------------------------------------- torch.compile and precision


# ---------------------------------------------------------------- A KV cache and inference


def test_the_lab_names_its_notebook():
    assert check.NOTEBOOK == "09_kernels.ipynb"
