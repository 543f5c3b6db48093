"""Lab 03's checks reject likely mistakes, each with a message that points at the mistake.
(tests/test_checks.py proves they pass on the solution and fail on the stub.)"""

import math

import pytest

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab03 as check


def accumulate_without_dividing(model, micro_batches, loss_fn):
    losses = [loss_fn(model, x, y) for x, y in micro_batches]
    for loss in losses:
        loss.backward()
    return sum(loss.item() for loss in losses) / len(losses)


def accumulate_zeroing_between(model, micro_batches, loss_fn):
    total = 0.0
    for x, y in micro_batches:
        model.zero_grad()
        loss = loss_fn(model, x, y)
        (loss / len(micro_batches)).backward()
        total += loss.item() / len(micro_batches)
    return total


def accumulate_returning_the_sum(model, micro_batches, loss_fn):
    total = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model, x, y)
        (loss / len(micro_batches)).backward()
        total += loss.item()
    return total


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (accumulate_without_dividing, "too big"),
        (accumulate_zeroing_between, "Do not zero"),
        (accumulate_returning_the_sum, "mean of the micro-batch losses"),
        (lambda model, batches, loss_fn: 0.0, "no gradients"),
    ],
)
def test_accumulation_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_accumulation(wrong)


def cosine_without_floor(step, max_steps, warmup, lr, min_lr):
    if step < warmup:
        return lr * (step + 1) / warmup
    return 0.5 * lr * (1 + math.cos(math.pi * (step - warmup) / (max_steps - warmup)))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda step, max_steps, warmup, lr, min_lr: lr, "warm-up"),
        (cosine_without_floor, "min_lr"),
    ],
)
def test_warmup_cosine_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_warmup_cosine(wrong)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda t, f, p: 100 * t * f / (p * 1e12), "fraction"),
        (lambda t, f, p: t * f / p, "1e12"),
    ],
)
def test_mfu_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_mfu(wrong)


@pytest.mark.parametrize(
    "wrong, hint", [(lambda loss: 2**loss, "natural log"), (lambda loss: math.exp(-loss), "grows")]
)
def test_perplexity_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_perplexity(wrong)
