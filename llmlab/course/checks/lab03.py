"""Checks for Lab 03 (training on one GPU)."""

import math

import torch

from llmlab.course.checks import ExerciseFailed, call, exercise, expect_number, is_close, passed
from llmlab.models import build_model, preset
from llmlab.train import TrainConfig, learning_rate, next_token_loss


def _tiny_model() -> torch.nn.Module:
    return build_model(preset("tiny", n_layer=1, d_model=32, n_head=2, vocab_size=64, context=8))


def _gradients(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@exercise()
def exercise_accumulation(accumulate) -> None:
    """Exercise 1: accumulate(model, micro_batches, loss_fn) leaves the big batch's gradient."""
    name = "Exercise 1 (gradient accumulation)"
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 64, (8, 9), generator=generator)
    inputs, targets = rows[:, :-1], rows[:, 1:]
    reference = _tiny_model()
    big_loss = next_token_loss(reference, inputs, targets)
    big_loss.backward()
    expected = _gradients(reference)

    model = _tiny_model()  # the same initial weights (build_model seeds them)
    micro_batches = [(inputs[i : i + 2], targets[i : i + 2]) for i in range(0, 8, 2)]
    got_loss = call(name, accumulate, model, micro_batches, next_token_loss)
    if not any(p.grad is not None for p in model.parameters()):
        raise ExerciseFailed(
            f"{name}: no gradients after accumulate(): call backward() on each micro-batch's loss."
        )
    got = _gradients(model)
    if torch.allclose(got, expected * len(micro_batches), rtol=1e-4, atol=1e-6):
        raise ExerciseFailed(
            f"{name}: the gradient is {len(micro_batches)}x too big: divide "
            "each micro-batch's loss by the number of micro-batches before "
            "backward(), so the sum of gradients is the gradient of the mean."
        )
    if not torch.allclose(got, expected, rtol=1e-4, atol=1e-6):
        raise ExerciseFailed(
            f"{name}: the accumulated gradient differs from one big batch's. "
            "Do not zero the gradients between micro-batches: backward() adds "
            "to .grad, which is exactly what accumulation needs."
        )
    expect_number(
        name,
        "the returned loss",
        float(got_loss),
        big_loss.item(),
        rel=1e-4,
        mistakes=[
            (len(micro_batches), "Return the mean of the micro-batch losses, not their sum.")
        ],
    )
    passed(name, "4 micro-batches of 2 give the gradient of one batch of 8")


@exercise()
def exercise_warmup_cosine(warmup_cosine) -> None:
    """Exercise 2: warmup_cosine(step, max_steps, warmup_steps, lr, min_lr)."""
    name = "Exercise 2 (warm-up then cosine)"
    for max_steps, warmup, lr, min_lr in [(100, 10, 1e-3, 1e-4), (1000, 50, 6e-4, 0.0)]:
        config = TrainConfig(
            max_steps=max_steps, warmup_steps=warmup, lr=lr, min_lr_ratio=min_lr / lr
        )
        for step in range(0, max_steps + 1, max(1, max_steps // 20)):
            got = call(name, warmup_cosine, step, max_steps, warmup, lr, min_lr)
            if step < warmup:
                # Warm-up conventions differ by one step: accept the common ones.
                accepted = [
                    lr * step / warmup,
                    lr * (step + 1) / warmup,
                    lr * (step + 1) / (warmup + 1),
                ]
                hint = "During warm-up the rate grows linearly from about 0 to lr."
            else:
                accepted = [learning_rate(step, config)]
                hint = (
                    "After warm-up: progress = (step - warmup) / (max_steps - warmup) and "
                    "lr_t = min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * progress))."
                )
            if not any(is_close(got, value, rel=1e-6, abs_tol=1e-12) for value in accepted):
                raise ExerciseFailed(
                    f"{name}: warmup_cosine({step}, {max_steps}, {warmup}, {lr}, {min_lr}) "
                    f"returned {got!r}, expected about {accepted[-1]:.6g}. {hint}"
                )
    passed(name, "linear warm-up, then a half cosine from lr down to min_lr at max_steps")


@exercise()
def exercise_mfu(model_flops_utilization) -> None:
    """Exercise 3: MFU from tokens/s, FLOPs per token and the peak in TFLOP/s (a fraction)."""
    name = "Exercise 3 (MFU)"
    for tokens_per_s, flops_per_token, peak_tflops in [
        (1.0e5, 6 * 124e6, 989.0),
        (4500.0, 3.6e7, 0.9),
    ]:
        got = call(name, model_flops_utilization, tokens_per_s, flops_per_token, peak_tflops)
        expected = tokens_per_s * flops_per_token / (peak_tflops * 1e12)
        expect_number(
            name,
            f"model_flops_utilization({tokens_per_s}, {flops_per_token}, {peak_tflops})",
            got,
            expected,
            mistakes=[
                (100.0, "Return a fraction (0.4 for 40%), not a percentage."),
                (1e12, "The peak is in TFLOP/s: multiply it by 1e12."),
            ],
        )
    passed(name, "GPT-2 small at 100k tokens/s on an H100 SXM is about 7.5% MFU")


@exercise()
def exercise_perplexity(perplexity) -> None:
    """Exercise 4: perplexity from a mean cross-entropy loss in nats."""
    name = "Exercise 4 (perplexity)"
    for loss in (0.0, 1.0, 3.5, math.log(8192)):
        got = call(name, perplexity, loss)
        expect_number(
            name,
            f"perplexity({loss})",
            got,
            math.exp(loss),
            rel=1e-6,
            mistakes=[
                (
                    2**loss / math.exp(loss),
                    "PyTorch's cross-entropy uses the natural log: exp(loss).",
                ),
                (math.exp(-2 * loss), "Perplexity is exp(+loss): it grows with the loss."),
            ],
        )
    passed(name, "a loss of ln(8192) = 9.01 is perplexity 8192: a uniform guess over the vocab")


NOTEBOOK = "03_training.ipynb"
# The function each exercise asks for -> its check (tests/test_checks.py runs them all).
EXERCISES = {
    "accumulate": exercise_accumulation,
    "warmup_cosine": exercise_warmup_cosine,
    "model_flops_utilization": exercise_mfu,
    "perplexity": exercise_perplexity,
}
