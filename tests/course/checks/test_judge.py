"""The machinery every lab's checks share: numbers of any type, messages without checker source,
and an exercise left undone that does not stop the rest of the lab."""

import numpy as np
import pytest
import torch
import torch.distributed as dist

from llmlab.course.checks import (
    ExerciseFailed,
    ExerciseNotDone,
    call,
    call_or_fail,
    compare_prediction,
    exercise,
    expect_number,
    real_number,
    run_on_ranks,
    tensor_of_shape,
)


@pytest.mark.parametrize(
    "value", [3, 3.0, np.float32(3.0), np.int64(3), np.float64(3.0), torch.tensor(3.0),
              torch.tensor(3), np.array(3.0)]
)
def test_any_real_number_type_is_accepted(value):
    assert real_number(value) == 3.0
    expect_number("Exercise", "f()", value, 3.0)  # does not raise


@pytest.mark.parametrize("value", [True, "3", [3.0], torch.tensor([3.0, 4.0]), None])
def test_a_non_number_is_named_as_the_problem(value):
    assert real_number(value) is None
    with pytest.raises(ExerciseFailed, match="return a number"):
        expect_number("Exercise", "f()", value, 3.0)


def test_a_wrong_number_names_the_likely_mistake():
    with pytest.raises(ExerciseFailed, match="expected about 6.*doubled"):
        expect_number("Exercise", "f()", 12.0, 6.0, mistakes=[(2.0, "doubled")])


def test_an_error_in_the_learners_code_is_named_with_its_input():
    with pytest.raises(ExerciseFailed, match=r"^Exercise 9: f\(3\) raised KeyError: 'x'$"):
        call_or_fail("Exercise 9", "f(3)", lambda value: {}["x"], 3)
    with pytest.raises(ExerciseNotDone):  # an undone exercise is still said to be not done
        call_or_fail("Exercise 9", "f(3)", _stub, 3)


def _reference(x):
    return 2 * x


@exercise(fallback=_reference, fallback_name="llmlab.reference")
def _check_doubling(fn):
    name = "Exercise 9 (doubling)"
    for x in (1, 5):
        expect_number(name, f"f({x})", call(name, fn, x), 2 * x)
    print("PASSED Exercise 9 (doubling)")


@exercise()
def _check_without_fallback(fn):
    call("Exercise 7 (no fallback)", fn, 1)


def _stub(x):
    raise NotImplementedError("a hint")


@pytest.mark.parametrize("got", [torch.ones(2, 3), np.ones((2, 3)), [[1, 1, 1], [1, 1, 1]]])
def test_a_tensor_answer_may_come_in_any_array_form(got):
    tensor = tensor_of_shape("Exercise 1", "f(x)", got, (2, 3), "a mask", "the weight's")
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (2, 3)


@pytest.mark.parametrize("got, match", [
    ({"a": 1}, r"returned a dict; return a tensor \(a mask of the weight's shape\)"),
    (torch.ones(3, 2), r"returned a mask of shape \(3, 2\), expected the weight's shape \(2, 3\)"),
])
def test_a_tensor_answer_of_another_kind_or_shape_is_named(got, match):
    with pytest.raises(ExerciseFailed, match=match):
        tensor_of_shape("Exercise 1", "f(x)", got, (2, 3), "a mask", "the weight's")


def test_a_passing_check_returns_the_learners_function(capsys):
    def mine(x):
        return x + x

    assert _check_doubling(mine) is mine
    assert "PASSED" in capsys.readouterr().out


def test_an_undone_exercise_does_not_stop_the_lab_and_hands_over_llmlabs_version(capsys):
    assert _check_doubling(_stub) is _reference
    out = capsys.readouterr().out
    assert "not done yet" in out and "llmlab.reference" in out


def test_without_a_fallback_later_use_says_which_exercise_to_finish(capsys):
    stand_in = _check_without_fallback(_stub)
    assert "not done yet" in capsys.readouterr().out
    with pytest.raises(ExerciseNotDone, match="Exercise 7 .* not done yet"):
        stand_in(1)


def test_a_wrong_answer_still_raises():
    with pytest.raises(ExerciseFailed, match="expected about 2"):
        _check_doubling(lambda x: 3 * x)


def test_a_failed_check_in_ipython_shows_its_message_and_no_checker_source(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns["check"] = _check_doubling
    shell.run_cell("check(lambda x: 3 * x)")
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert "ExerciseFailed: Exercise 9 (doubling): f(1) returned 3" in text
    assert "expect_number(" not in text and "Traceback" not in text and "def " not in text
    shell.run_cell("def broken():\n    raise ExerciseFailed('a plain failure')\n")  # sanity:
    assert shell.user_ns["broken"]  # the shell really ran code


def test_prediction_is_shown_against_the_measurement(capsys):
    compare_prediction("step time", 2, 3.0, "s")
    shown = capsys.readouterr().out
    assert "you predicted 2 s, measured 3 s (measured / predicted = 1.50)" in shown
    compare_prediction("step time", ..., 3.0, "s")
    assert "No prediction was written" in capsys.readouterr().out


def _stub_on_ranks():
    raise NotImplementedError("write this")


def _raises_on_rank_one():
    if dist.get_rank() == 1:
        raise KeyError("no such expert")
    return dist.get_rank()


def _rank():
    return dist.get_rank()


def test_run_on_ranks_returns_results_in_rank_order_and_names_a_stub_or_an_exception():
    assert run_on_ranks("Exercise 9", _rank, 3) == [0, 1, 2]
    with pytest.raises(ExerciseNotDone, match="Exercise 9 is not done yet"):
        run_on_ranks("Exercise 9", _stub_on_ranks, 2)
    with pytest.raises(ExerciseFailed, match="raised an exception on rank 1") as failure:
        run_on_ranks("Exercise 9", _raises_on_rank_one, 2)
    assert "KeyError: 'no such expert'" in str(failure.value)
