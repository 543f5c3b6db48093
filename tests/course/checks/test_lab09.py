"""Lab 09's checks accept correct answers in their several forms and reject likely mistakes,
each with a message that names it. (tests/test_checks.py proves they pass on the solution
notebook and say "not done yet" on the generated stub.)"""

import pytest
import torch

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab09 as check
from llmlab.numerics import flushed_accumulate


def fails(check_fn, answer, match):
    with pytest.raises(ExerciseFailed, match=match):
        check_fn(answer)


def stub(*args, **kwargs):
    raise NotImplementedError("the hint")


# ---------------------------------------------------------------- Profiling and rooflines


# ---------------------------------------------------------------- A Triton kernel


# ---------------------------------------------------------------- torch.compile and precision


def flushed_sum(*, flush=True, reset=True, last_block=True, narrow_total=False, torch_sum=False,
                narrow=True, out_dtype=torch.float32, keep_dims=False):  # fmt: skip
    """A learner's flushed accumulator with one switch per likely mistake (defaults: a correct
    one, written the way the exercise asks: a loop over the terms, rounding after every add)."""

    def answer(values, dtype, block):
        length = values.shape[-1]
        stop = length if last_block else length // block * block
        total = torch.zeros(values.shape[:-1], dtype=dtype if narrow_total else torch.float32)
        partial = torch.zeros(values.shape[:-1], dtype=dtype if narrow else torch.float32)
        for start in range(0, stop, block):
            if torch_sum:
                partial = values[..., start : start + block].to(dtype).sum(-1)
            else:
                for term in values[..., start : start + block].unbind(-1):
                    partial = (partial + term).to(dtype if narrow else torch.float32)
            if flush:
                total = (total + partial.float()).to(total.dtype)
                if reset:
                    partial = torch.zeros_like(partial)
        if not flush:
            total = partial.float()
        result = total.to(out_dtype)
        return result.unsqueeze(-1) if keep_dims else result

    return answer


def vectorised(values, dtype, block):
    """Another correct form: the running sums of all rows at once, in the narrow dtype's own
    arithmetic (bf16 + bf16 is computed in float32 and rounded once, like the exercise asks)."""
    total = torch.zeros(values.shape[:-1])
    for part in values.split(block, dim=-1):
        partial = torch.zeros(values.shape[:-1], dtype=dtype)
        for column in part.unbind(-1):
            partial = partial + column.to(dtype)
        total += partial.float()
    return total


def test_flushed_sum_accepts_right_answers_in_their_forms(capsys):
    for answer in (flushed_sum(), vectorised, flushed_accumulate):
        assert check.exercise_flushed_sum(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == 3


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(flush=False), "never flushed"),
        (dict(reset=False), "not reset after it is added"),
        (dict(last_block=False), "last, shorter block is missing"),
        (dict(narrow_total=True), "total is rounded to the narrow dtype too"),
        (dict(torch_sum=True), "rounded once, at its end"),
        (dict(narrow=False), "no rounding error at all"),
        (dict(out_dtype=torch.bfloat16), "returned torch.bfloat16: the total is float32"),
        (dict(keep_dims=True), r"returned shape \(3, 1\), expected \(3,\)"),
    ],
)
def test_flushed_sum_rejects_likely_mistakes(switch, match):
    fails(check.exercise_flushed_sum, flushed_sum(**switch), match)


def test_flushed_sum_rejects_a_number_and_names_an_unknown_mistake():
    fails(check.exercise_flushed_sum, lambda values, dtype, block: 0.0, "returned a float")
    fails(check.exercise_flushed_sum, lambda values, dtype, block: values.sum(-1) * 0.9,
          "compare yours with llmlab.numerics.flushed_accumulate")  # fmt: skip


def test_flushed_sum_on_the_stub_returns_llmlab_s_version(capsys):
    assert check.exercise_flushed_sum(stub) is flushed_accumulate
    assert "not done yet" in capsys.readouterr().out


# ---------------------------------------------------------------- A KV cache and inference


def test_the_lab_names_its_notebook():
    assert check.NOTEBOOK == "09_kernels.ipynb"
