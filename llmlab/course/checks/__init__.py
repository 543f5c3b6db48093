"""Exercise checks: call the learner's function on several inputs and compare with the reference.

In a notebook a check is used as `my_fn = check.exercise_name(my_fn)`. It prints a one-line pass
message and returns the learner's function; or raises `ExerciseFailed` whose message (and only
the message: no checker source) names the input, the expected and the returned value, and a hint
aimed at the likely mistake. An exercise not done yet stops nothing: the check says so and returns
llmlab's version, so the rest of the lab still runs (see `exercise`). The shared machinery is in
`judge`; each lab's checks in `labNN`.
"""

from llmlab.course.checks.judge import (
    ExerciseFailed,
    ExerciseNotDone,
    call,
    call_or_fail,
    compare_prediction,
    exercise,
    expect_number,
    expect_real,
    failure_from,
    is_close,
    passed,
    real_number,
    run_on_ranks,
    tensor_of_shape,
)

__all__ = [
    "ExerciseFailed", "ExerciseNotDone", "call", "call_or_fail", "compare_prediction", "exercise",
    "expect_number", "expect_real", "failure_from", "is_close", "passed", "real_number",
    "run_on_ranks", "tensor_of_shape",
]
