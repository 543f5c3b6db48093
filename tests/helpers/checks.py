"""What the tests of the exercise checks share: a wrong answer that must be refused, and a stub."""

import pytest

from llmlab.course.checks import ExerciseFailed


def fails(check_fn, answer, match):
    """The check refuses `answer` with a message matching `match`."""
    with pytest.raises(ExerciseFailed, match=match):
        check_fn(answer)


def stub(*args, **kwargs):
    """An exercise the learner has not done yet: what the generated lab's stub does."""
    raise NotImplementedError("the hint")


def buggy(*args, **kwargs):
    """An answer with a bug of its own: the check must name the input it raised on."""
    raise KeyError("a bug of its own")


# What a check says when the learner's code raises (see `buggy`).
BUG_NAMED = r" raised KeyError: 'a bug of its own'"
