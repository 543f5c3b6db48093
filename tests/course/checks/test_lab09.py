"""Lab 09's checks accept correct answers in their several forms and reject likely mistakes, each
with a message that names it. (tests/course/checks/test_every_lab.py proves they pass on the
solution notebook and say "not done yet" on the generated stub.)"""

import pytest

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab09 as check


def fails(check_fn, answer, match):
    with pytest.raises(ExerciseFailed, match=match):
        check_fn(answer)


def stub(*args, **kwargs):
    raise NotImplementedError("the hint")


# ---------------------------------------------------------------- Profiling and rooflines


# ---------------------------------------------------------------- A Triton kernel


# ---------------------------------------------------------------- torch.compile and precision


# ---------------------------------------------------------------- A KV cache and inference


def test_the_lab_names_its_notebook():
    assert check.NOTEBOOK == "09_kernels.ipynb"
