"""What every lab's checks share: call the learner's function (a stub not done yet falls back
to llmlab's version), read any real number, compare with the reference, and fail with a message
that helps or pass with one line."""

import functools
import math
import numbers
import traceback
from collections.abc import Callable, Iterable

import torch

from llmlab.distributed import LaunchError, launch


class ExerciseFailed(AssertionError):
    """The learner's answer is missing or wrong; the message says what to do."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows these lines instead of a traceback: the traceback would print the
        # checker's source, expected formula included.
        return [f"{type(self).__name__}: {line}" for line in str(self).splitlines()]


class ExerciseNotDone(ExerciseFailed):
    """The exercise still holds its stub (`raise NotImplementedError`)."""

    def __init__(self, exercise: str):
        self.exercise = exercise
        super().__init__(
            f"{exercise} is not done yet: replace `raise NotImplementedError(...)` in the "
            "exercise cell with your code, run that cell, then run this check again."
        )


def exercise(fallback: Callable | None = None, fallback_name: str | None = None):
    """Make a check `check(fn) -> None` return the function the rest of the lab should use.

    - right answer: the check prints PASSED and the learner's `fn` comes back;
    - wrong answer: `ExerciseFailed` is raised (the learner must see it);
    - not done yet: a note is printed instead of an error, so "Run All" goes on, and the rest of
      the lab gets `fallback` (llmlab's version, named by `fallback_name`), or, with none, a
      function that says which exercise to finish first.
    """

    def decorate(check: Callable[[Callable], None]) -> Callable[[Callable], Callable]:
        @functools.wraps(check)
        def run(fn: Callable) -> Callable:
            try:
                check(fn)
            except ExerciseNotDone as not_done:
                return _not_done(not_done, fallback, fallback_name)
            return fn

        return run

    return decorate


def _not_done(not_done: ExerciseNotDone, fallback, fallback_name) -> Callable:
    if fallback is not None:
        where = fallback_name or f"{fallback.__module__}.{fallback.__qualname__}"
        print(f"NOT DONE {not_done}\nUntil then the rest of the lab uses llmlab's version "
              f"({where}).")
        return fallback
    print(f"NOT DONE {not_done}")

    def finish_first(*args, **kwargs):
        raise ExerciseNotDone(not_done.exercise) from None

    return finish_first


def call(exercise: str, fn: Callable, *args, **kwargs):
    """Call the learner's function, turning the unfilled stub into a clear message."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise ExerciseNotDone(exercise) from None


def failure_from(exercise: str, call_text: str, error: Exception) -> ExerciseFailed:
    """The failure to raise when the learner's code raised `error` on `call_text`: the error named
    with the input, instead of a traceback through the checker's source. A failure the call
    itself raised (an exercise not done yet) stays as it is."""
    if isinstance(error, ExerciseFailed):
        return error
    return ExerciseFailed(f"{exercise}: {call_text} raised {type(error).__name__}: {error}")


def call_or_fail(exercise: str, call_text: str, fn: Callable, *args, **kwargs):
    """`call`, with an error the learner's function raises turned into a failure that names the
    input (`call_text`) and the error."""
    try:
        return call(exercise, fn, *args, **kwargs)
    except Exception as error:  # the learner's own bug: show where, not the checker's source
        raise failure_from(exercise, call_text, error) from error


def real_number(value) -> float | None:
    """`value` as a float when it is a real number of any type (int, float, numpy scalar, 0-d
    tensor); None for anything else (bool, str, a list, a tensor with several elements)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):  # int, float, numpy scalars (registered as Real)
        return float(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # 0-d tensor or array
        return real_number(value.item())
    return None


def is_close(got, expected: float, rel: float, abs_tol: float = 0.0) -> bool:
    number = real_number(got)
    return number is not None and math.isclose(number, expected, rel_tol=rel, abs_tol=abs_tol)


def expect_real(exercise: str, call_text: str, got) -> float:
    """`got` as a float, or a failure that says a number was expected (not "expected about")."""
    number = real_number(got)
    if number is None:
        raise ExerciseFailed(
            f"{exercise}: {call_text} returned {got!r} (a {type(got).__name__}); return a number."
        )
    return number


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
    expect_real(exercise, call_text, got)
    if is_close(got, expected, rel):
        return
    hint = next((text for factor, text in mistakes if is_close(got, expected * factor, rel)), "")
    raise ExerciseFailed(
        f"{exercise}: {call_text} returned {got!r}, expected about {expected:.6g}. {hint}".strip()
    )


def tensor_of_shape(exercise: str, call_text: str, got, shape: tuple, what: str,
                    whose: str) -> torch.Tensor:
    """`got` (a tensor, a numpy array, nested lists) as a CPU tensor of `shape`, or a failure that
    says what to return: `what` the answer is ("a mask"), `whose` shape it has ("the weight's")."""
    try:
        tensor = torch.as_tensor(got)
    except (TypeError, ValueError, RuntimeError):
        raise ExerciseFailed(f"{exercise}: {call_text} returned a {type(got).__name__}; return "
                             f"a tensor ({what} of {whose} shape).") from None
    if tuple(tensor.shape) != tuple(shape):
        raise ExerciseFailed(f"{exercise}: {call_text} returned {what} of shape "
                             f"{tuple(tensor.shape)}, expected {whose} shape {tuple(shape)}.")
    return tensor.detach().cpu()


def passed(exercise: str, detail: str) -> None:
    print(f"PASSED {exercise}: {detail}")


def compare_prediction(label: str, predicted, measured: float, unit: str = "") -> None:
    """Show the learner's prediction (written before the measurement ran) against the result."""
    number = real_number(predicted)
    if number is None:
        print(f"{label}: measured {measured:.4g} {unit}. No prediction was written: set it before "
              "running the measurement next time; guessing first is how intuition gets trained.")
        return
    ratio = measured / number if number else math.inf
    print(f"{label}: you predicted {number:.4g} {unit}, measured {measured:.4g} {unit} "
          f"(measured / predicted = {ratio:.2f})")


# ---------------------------------------------------------------- the learner's code on ranks

WORKER_TIMEOUT_S = 60  # a hung rank (a send nobody receives) fails the check instead of the lab
_NOT_DONE = "not done"  # what a worker sends back when the learner's code is still the stub
_RAISED = "the learner's code raised"  # marks a worker's failure that is an exception, not a hang


def run_on_ranks(exercise: str, worker: Callable, nprocs: int, *args) -> list:
    """`worker(*args)` on each of `nprocs` ranks (forked gloo processes, `launch`); their results
    in rank order. The stub's NotImplementedError means "not done"; an exception in the learner's
    code fails the check with that exception, and a hang with a note on what hangs a rank."""
    try:
        results = launch(_guarded, nprocs=nprocs, args=(worker, *args), timeout_s=WORKER_TIMEOUT_S)
    except LaunchError as error:
        raise ExerciseFailed(_launch_failure(exercise, nprocs, str(error))) from None
    if any(result == _NOT_DONE for result in results):
        raise ExerciseNotDone(exercise)
    return results


def _launch_failure(exercise: str, nprocs: int, error: str) -> str:
    """An exception in the learner's code as the exception it is; anything else as a hang."""
    if _RAISED in error:
        rank = error.split(" raised an error", 1)[0].removeprefix("rank ")
        learner = error.split(f"{_RAISED}:\n", 1)[1]
        # The launcher's note on the ranks it stopped afterwards is not about the learner's code.
        learner = "\n".join(line for line in learner.splitlines() if not line.startswith("rank("))
        return (f"{exercise}: with {nprocs} processes your code raised an exception on rank "
                f"{rank}:\n{learner.strip()}")
    return (f"{exercise}: with {nprocs} processes your code failed or hung. A rank that waits for "
            "a message nobody sends (or sends to the wrong rank) hangs until the timeout."
            f"\n{error}")


def _guarded(worker: Callable, *args):
    try:
        return worker(*args)
    except NotImplementedError:
        return _NOT_DONE
    except Exception:  # the learner's error, shown in the parent without the checker's frames
        raise RuntimeError(f"{_RAISED}:\n{traceback.format_exc(limit=-3)}") from None
