"""Exercise checks: call the learner's function on several inputs and compare with the reference.

A check prints a one-line pass message, or raises `ExerciseFailed` whose message names the input,
the expected and the returned value, and a hint aimed at the likely mistake.
"""

import math
from collections.abc import Callable, Iterable


class ExerciseFailed(AssertionError):
    """The learner's answer is missing or wrong; the message says what to do."""


def call(exercise: str, fn: Callable, *args):
    """Call the learner's function, turning the unfilled stub into a clear message."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise ExerciseFailed(
            f"{exercise} is not done yet: replace `raise NotImplementedError(...)` in the "
            "exercise cell with your code, run that cell, then run this check again."
        ) from None


def is_close(got, expected: float, rel: float, abs_tol: float = 0.0) -> bool:
    return isinstance(got, (int, float)) and math.isclose(
        got, expected, rel_tol=rel, abs_tol=abs_tol
    )


def expect_number(
    exercise: str,
    call_text: str,
    got,
    expected: float,
    *,
    rel: float = 1e-3,
    mistakes: Iterable[tuple[float, str]] = (),
) -> None:
    """Fail unless `got` is within `rel` of `expected`; `mistakes` maps a wrong factor to a hint."""
    if is_close(got, expected, rel):
        return
    hint = next((text for factor, text in mistakes if is_close(got, expected * factor, rel)), "")
    raise ExerciseFailed(
        f"{exercise}: {call_text} returned {got!r}, expected about {expected:.6g}. {hint}".strip()
    )


def passed(exercise: str, detail: str) -> None:
    print(f"PASSED {exercise}: {detail}")
