"""Checks for Lab 09 (kernels and profiling), and the versions the lab falls back to."""

from llmlab.course.checks import ExerciseFailed, call, exercise, passed  # noqa: F401

# ---------------------------------------------------------------- Profiling and rooflines
# (sections 1-2 of the lab)


# ---------------------------------------------------------------- A Triton kernel
# (section 4 of the lab)


# ---------------------------------------------------------------- torch.compile and precision
# (sections 3 and 5 of the lab)


# ---------------------------------------------------------------- A KV cache and inference
# (section 6 of the lab)


NOTEBOOK = "09_kernels.ipynb"
# The function or class each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    # profiling


    # Triton kernel


    # compile and precision


    # KV cache and inference

}
