"""Lab 02's checks reject likely mistakes, each with a message that points at the mistake.
(tests/test_checks.py proves they pass on the solution and fail on the stub.)"""

import pytest

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab02 as check


def _block(d, f, biases=True, norm_values=4):
    return 4 * d * d + 2 * d * f + (3 * d + d + f + d if biases else 0) + norm_values * d


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda d, f, h: _block(d, f, biases=False), "Count the biases"),
        (lambda d, f, h: _block(d, f, norm_values=0), "Count the two LayerNorms"),
        (lambda d, f, h: _block(d, f, norm_values=2), "a shift as well as a scale"),
        (lambda d, f, h: _block(d, 4 * d), "width is d_ff"),
        (lambda d, f, h: _block(d, f) + h * d, "expected about"),  # heads add parameters
    ],
)
def test_block_params_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_block_params(wrong)


STATES = {"adamw": 2, "sgd-momentum": 1, "sgd": 0}


def _states(n, optimizer, mixed, master=4, grads=None, state_bytes=4, unit=1):
    weights_and_grads = (
        (2 + (2 if grads is None else grads) + master)
        if mixed
        else (4 + (4 if grads is None else grads))
    )
    return n * (weights_and_grads + state_bytes * STATES[optimizer]) / unit


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda n, o, m: _states(n, o, m, master=0), "master copy"),
        (lambda n, o, m: _states(n, o, m, grads=0), "Gradients count too"),
        (lambda n, o, m: _states(n, o, m, state_bytes=0), "optimizer's states count too"),
        # 16-bit optimizer states: refused, but as many bytes as a missing gradient (one state)
        # or a missing master copy (two), so no hint can tell which.
        (lambda n, o, m: _states(n, o, m, state_bytes=2 if m else 4), "expected about"),
        (lambda n, o, m: _states(n, o, m, unit=1e9), "not GB"),
        (lambda n, o, m: n * 16, "expected about"),  # 16 bytes whatever the optimizer
    ],
)
def test_model_state_bytes_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_model_state_bytes(wrong)


def _activations(b, s, d, h, nbytes, eager, batch=True, scores=True, heads=True, per_byte=True):
    per_token = 16 * d + (h if heads else 1) * s * (eager and scores)
    return (b if batch else 1) * s * per_token * (nbytes if per_byte else 1)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda *a: _activations(*a, batch=False), "Multiply by the batch"),
        (lambda *a: _activations(*a, scores=False), "keeps the softmax output"),
        (lambda *a: _activations(*a, heads=False), "for every head"),
        (lambda *a: _activations(*a, per_byte=False), "bytes_per_value"),
        (lambda b, s, d, h, n, e: b * s * (34 * d + 5 * h * s) * n / 2, "expected about"),
    ],
)
def test_layer_activation_bytes_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_layer_activation_bytes(wrong)


def test_layer_activation_bytes_says_fused_attention_keeps_no_scores():
    def always_scores(b, s, d, h, nbytes, eager):
        return b * s * (16 * d + h * s) * nbytes

    with pytest.raises(ExerciseFailed, match="does not keep the seq x seq"):
        check.exercise_layer_activation_bytes(always_scores)


def _zero(n, gpus, gpu_gb, unit=1e9, strict=False, last=None):
    sizes = [16 * n, 4 * n + 12 * n / gpus, 2 * n + 14 * n / gpus, 16 * n / gpus]
    for stage, nbytes in enumerate(sizes):
        if nbytes < gpu_gb * unit or (not strict and nbytes == gpu_gb * unit):
            return stage
    return last


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda n, g, gb: _zero(n, g, gb, last=3), "Even stage 3 does not fit"),
        (lambda n, g, gb: _zero(n, g, gb, unit=2**30), "returned 2, expected 3"),  # GiB, not GB
        (lambda n, g, gb: _zero(n, g, gb, strict=True), "at most gpu_gb"),  # < instead of <=
        (lambda n, g, gb: 3, "stage 0: 120.00 GB"),  # always the most sharding
    ],
)
def test_smallest_zero_stage_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_smallest_zero_stage(wrong)
