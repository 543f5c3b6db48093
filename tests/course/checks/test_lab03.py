"""Lab 03's checks accept correct answers in their several forms and reject likely mistakes, each
with a message that points at the mistake. (tests/course/checks/test_every_lab.py proves they
pass on the solution notebook and say "not done yet" on the generated stub.)"""

import math
import random
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab03 as check
from llmlab.course.checks.lab03 import IGNORE, accumulate_token_weighted
from llmlab.models import next_token_loss
from llmlab.train.muon import COEFFICIENTS, newton_schulz

ROOT = Path(__file__).resolve().parents[3]


def summed_loss(model, inputs, targets):
    logits = model(inputs).logits
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")


def counted(micro_batches):
    return sum(int((y != IGNORE).sum()) for _, y in micro_batches)


# ---------------------------------------------------------------- Exercise 1


def accumulate_skipping_empty_micro_batches(model, micro_batches):
    kept = [(x, y) for x, y in micro_batches if (y != IGNORE).any()]
    return accumulate_token_weighted(model, kept)


def accumulate_with_the_forward_of_empty_micro_batches_unused(model, micro_batches):
    n, total = counted(micro_batches), 0.0
    for x, y in micro_batches:
        loss_sum = summed_loss(model, x, y)
        if (y != IGNORE).any():  # nothing to learn from the other: no backward()
            (loss_sum / n).backward()
            total += loss_sum.item()
    return torch.tensor(total / n)  # a 0-d tensor is a number too


def accumulate_with_a_mean_loss_times_its_count(model, micro_batches):
    n, total = counted(micro_batches), 0.0
    for x, y in micro_batches:
        count = int((y != IGNORE).sum())
        if count:
            logits = model(x).logits
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())  # mean over counted
            (loss * count / n).backward()
            total += loss.item() * count
    return np.float32(total / n)


@pytest.mark.parametrize("right", [
    accumulate_token_weighted,
    accumulate_skipping_empty_micro_batches,
    accumulate_with_the_forward_of_empty_micro_batches_unused,
    accumulate_with_a_mean_loss_times_its_count,
], ids=lambda f: f.__name__)
def test_accumulation_accepts_every_correct_form(right, capsys):
    check.exercise_accumulation(right)
    assert "PASSED" in capsys.readouterr().out


def one_big_padded_batch(model, micro_batches):
    inputs, targets = check._one_big_batch(micro_batches)
    loss = summed_loss(model, inputs, targets) / counted(micro_batches)
    loss.backward()
    return loss.item()


def sum_without_dividing(model, micro_batches):
    total = 0.0
    for x, y in micro_batches:
        loss_sum = summed_loss(model, x, y)
        loss_sum.backward()
        total += loss_sum.item()
    return total / counted(micro_batches)


def mean_of_per_micro_batch_means(model, micro_batches):
    total = 0.0
    for x, y in micro_batches:
        loss = summed_loss(model, x, y) / max(1, int((y != IGNORE).sum()))
        (loss / len(micro_batches)).backward()
        total += loss.item() / len(micro_batches)
    return total


def mean_loss_times_count_even_with_nothing_counted(model, micro_batches):
    n, total = counted(micro_batches), 0.0
    for x, y in micro_batches:
        count = int((y != IGNORE).sum())
        loss = F.cross_entropy(model(x).logits.flatten(0, 1), y.flatten())  # 0/0 when count=0
        (loss * count / n).backward()
        total += loss.item() * count
    return total / n


def one_backward_on_the_summed_losses_after_the_loop(model, micro_batches):
    n = counted(micro_batches)
    loss = sum(summed_loss(model, x, y) for x, y in micro_batches) / n
    loss.backward()
    return loss.item()


def zeroing_between_micro_batches(model, micro_batches):
    n, total = counted(micro_batches), 0.0
    for x, y in micro_batches:
        model.zero_grad()
        loss_sum = summed_loss(model, x, y)
        (loss_sum / n).backward()
        total += loss_sum.item()
    return total / n


def counting_the_ignored_positions(model, micro_batches):
    n = sum(y.numel() for _, y in micro_batches)
    total = 0.0
    for x, y in micro_batches:
        loss_sum = summed_loss(model, x, y)
        (loss_sum / n).backward()
        total += loss_sum.item()
    return total / n


def labels_given_to_the_model(model, micro_batches):
    n, total = counted(micro_batches), 0.0
    for x, y in micro_batches:  # Hugging Face shifts labels itself: the targets are shifted twice
        count = int((y != IGNORE).sum())
        if count:
            loss = model(x, labels=y).loss * count
            (loss / n).backward()
            total += loss.item()
    return total / n


def returning_the_mean_of_means(model, micro_batches):
    accumulate_token_weighted(model, micro_batches)
    means = [summed_loss(model, x, y).item() / max(1, int((y != IGNORE).sum()))
             for x, y in micro_batches]
    return sum(means) / len(means)


@pytest.mark.parametrize("wrong, hint", [
    (one_big_padded_batch, "one big batch"),
    (sum_without_dividing, "too big"),
    (mean_of_per_micro_batch_means, "weighs as much"),
    (mean_loss_times_count_even_with_nothing_counted, "NaN"),
    (one_backward_on_the_summed_losses_after_the_loop, "before the previous one's backward"),
    (zeroing_between_micro_batches, "do not zero"),
    (counting_the_ignored_positions, "ignored positions"),
    (labels_given_to_the_model, "already shifted"),
    (returning_the_mean_of_means, "returned the loss"),
    (lambda model, micro_batches: 0.0, "no gradients"),
], ids=lambda case: getattr(case, "__name__", None))
def test_accumulation_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_accumulation(wrong)


# ---------------------------------------------------------------- Exercise 2: the whole step


def _step(model, optimizer, scaler, micro_batches, max_norm, *, scale=True, divide=True,
          unscale_first=True, clip_norm_out=False, scaler_step=True, update=True, zero=True,
          zero_first=False, backward_in_loop=True, loss_sum=False, scaled_loss=False,
          pair=True, unscale_late=False):
    """The trainer's step, right by default; each argument swaps in one mistake."""
    if zero_first:
        optimizer.zero_grad()
    k = len(micro_batches)
    losses = []
    for inputs, targets in micro_batches:
        loss = next_token_loss(model, inputs, targets) / (k if divide else 1)
        scaled = scaler.scale(loss) if scale else loss
        if backward_in_loop:
            scaled.backward()
        losses.append((scaled if scaled_loss else loss) * (1 if divide else 1 / k))
    if not backward_in_loop:
        sum(scaler.scale(loss) for loss in losses).backward()
    if unscale_first:
        scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if unscale_late:
        scaler.unscale_(optimizer)
    if clip_norm_out:
        norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    (scaler.step if scaler_step else lambda optimizer: optimizer.step())(optimizer)
    if update:
        scaler.update()
    if zero and not zero_first:
        optimizer.zero_grad()
    loss = sum(loss.item() for loss in losses) * (k if loss_sum else 1)
    return (loss, norm) if pair else loss


def step_with(**mistake):
    return lambda *args: _step(*args, **mistake)


@pytest.mark.parametrize("right", [
    step_with(),
    step_with(zero_first=True),  # gradients cleared at the start of the step instead of the end
    lambda *args: tuple(np.float32(value) for value in _step(*args)),
    lambda *args: tuple(torch.as_tensor(value) for value in _step(*args)),
], ids=["trainer", "zero-first", "numpy", "tensors"])
def test_train_step_accepts_every_correct_form(right, capsys):
    check.exercise_train_step(right)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    pytest.param(dict(unscale_first=False), "never called scaler.unscale_", id="never-unscaled"),
    pytest.param(dict(unscale_first=False, unscale_late=True), "Unscale them",
                 id="clipped-before-unscaling"),
    pytest.param(dict(scale=False), "did not use scaler.scale", id="loss-not-scaled"),
    pytest.param(dict(divide=False), "divide each micro-batch's loss", id="not-divided-by-k"),
    pytest.param(dict(clip_norm_out=True), "norm after clipping", id="norm-after-clipping"),
    pytest.param(dict(scaler_step=False), "scaler.step", id="optimizer-step-after-overflow"),
    pytest.param(dict(update=False), "scaler.update", id="no-update"),
    pytest.param(dict(zero=False), "adds to .grad", id="gradients-never-cleared"),
    pytest.param(dict(backward_in_loop=False), "activations were all in memory",
                 id="one-backward-after-the-loop"),
    pytest.param(dict(loss_sum=True), "sum over the micro-batches", id="loss-summed"),
    pytest.param(dict(scaled_loss=True), "scaled loss", id="scaled-loss-returned"),
    pytest.param(dict(pair=False), "return a pair", id="loss-only"),
])
def test_train_step_rejects_likely_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_train_step(step_with(**mistake))


def test_train_step_names_every_missing_call_at_once():
    with pytest.raises(ExerciseFailed, match=r"never called scaler.unscale_\(optimizer\) .*, "
                       r"scaler.update\(\) .* or optimizer.zero_grad\(\)"):
        check.exercise_train_step(step_with(unscale_first=False, update=False, zero=False))


def test_train_step_counts_a_model_zero_grad_and_not_the_unscale_inside_scaler_step():
    def model_zero_grad(model, optimizer, scaler, micro_batches, max_norm):
        model.zero_grad()  # as good as the optimizer's: it clears the same gradients
        return _step(model, optimizer, scaler, micro_batches, max_norm, zero=False,
                     unscale_first=False)  # scaler.step unscales by itself, too late to clip

    only_unscale = r"never called scaler.unscale_\(optimizer\) \("
    with pytest.raises(ExerciseFailed, match=only_unscale) as failure:
        check.exercise_train_step(model_zero_grad)
    assert "zero_grad" not in str(failure.value) and "scaler.step" not in str(failure.value)


def test_the_fallback_step_is_the_trainers_and_leaves_the_callers_random_state():
    model = check._tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = [tuple(torch.randint(0, check.VOCAB, (2, 8)) for _ in range(2))]
    torch.manual_seed(3)
    before = torch.get_rng_state()
    loss, norm = check.trainer_step(model, optimizer, check._scaler(), batch, 1.0)
    assert torch.equal(torch.get_rng_state(), before)  # Trainer() seeds; the step gives it back
    assert math.isfinite(float(loss)) and float(norm) > 0
    assert all(p.grad is None for p in model.parameters())


# ---------------------------------------------------------------- Exercise 3


def warmup_from_zero(step, max_steps, warmup, lr, min_lr):
    if step < warmup:
        return lr * step / warmup
    return check.warmup_cosine_reference(step, max_steps, warmup, lr, min_lr)


def warmup_reaching_lr_one_step_late(step, max_steps, warmup, lr, min_lr):
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    return check.warmup_cosine_reference(step, max_steps, warmup, lr, min_lr)


@pytest.mark.parametrize("right", [
    check.warmup_cosine_reference, warmup_from_zero, warmup_reaching_lr_one_step_late,
    lambda *args: np.float32(check.warmup_cosine_reference(*args)),
], ids=["llmlab", "from_zero", "one_step_late", "numpy_float32"])
def test_warmup_cosine_accepts_every_convention(right, capsys):
    check.exercise_warmup_cosine(right)
    assert "PASSED" in capsys.readouterr().out


def cosine(step, max_steps, warmup, lr, min_lr, start, floor=True, turns=0.5):
    progress = (step - start) / max(1, max_steps - start)
    low = min_lr if floor else 0.0
    return low + 0.5 * (lr - low) * (1 + math.cos(2 * math.pi * turns * progress))


def jumping_to_full_rate_part_way(step, max_steps, warmup, lr, min_lr):
    if step < warmup:
        return lr * (step + 1) / warmup if step < 0.6 * warmup else lr
    return cosine(step, max_steps, warmup, lr, min_lr, warmup)


def without_warmup(step, max_steps, warmup, lr, min_lr):
    return cosine(step, max_steps, warmup, lr, min_lr, warmup) if step >= warmup else lr


def without_floor(step, max_steps, warmup, lr, min_lr):
    if step < warmup:
        return lr * (step + 1) / warmup
    return cosine(step, max_steps, warmup, lr, min_lr, warmup, floor=False)


def decay_counted_from_step_zero(step, max_steps, warmup, lr, min_lr):
    if step < warmup:
        return lr * (step + 1) / warmup
    return cosine(step, max_steps, warmup, lr, min_lr, start=0)


def a_full_cosine_period(step, max_steps, warmup, lr, min_lr):
    if step < warmup:
        return lr * (step + 1) / warmup
    return cosine(step, max_steps, warmup, lr, min_lr, warmup, turns=1.0)


def integer_division_in_the_warmup(step, max_steps, warmup, lr, min_lr):
    if step < warmup:
        return lr * ((step + 1) // warmup)
    return cosine(step, max_steps, warmup, lr, min_lr, warmup)


@pytest.mark.parametrize("wrong, hint", [
    (jumping_to_full_rate_part_way, "warm-up"),
    (without_warmup, "warm-up"),
    (without_floor, "min_lr"),
    (decay_counted_from_step_zero, "end of the warm-up"),
    (a_full_cosine_period, "half cosine"),
    (integer_division_in_the_warmup, "grown in proportion"),
    (lambda step, max_steps, warmup, lr, min_lr: [lr], "return a number"),
], ids=lambda case: getattr(case, "__name__", None))
def test_warmup_cosine_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_warmup_cosine(wrong)


# ---------------------------------------------------------------- Exercise 4


@pytest.mark.parametrize("right", [
    lambda t, f, p: t * f / (p * 1e12),
    lambda t, f, p: torch.tensor(t * f / p / 1e12),
    check.mfu_reference,
], ids=["formula", "tensor", "llmlab"])
def test_mfu_accepts_any_number_type(right, capsys):
    check.exercise_mfu(right)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda t, f, p: 100 * t * f / (p * 1e12), "fraction"),
    (lambda t, f, p: t * f / p, "TFLOP/s"),
    (lambda t, f, p: t * f / (p * 1e9), "Tera"),
    (lambda t, f, p: f / (p * 1e12), "expected about"),
], ids=["percentage", "peak_not_scaled", "giga_for_tera", "no_tokens_per_s"])
def test_mfu_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_mfu(wrong)


def test_mfu_check_quotes_the_course_formula(capsys):
    check.exercise_mfu(check.mfu_reference)
    assert "8.6% MFU" in capsys.readouterr().out  # 6N alone would say 7.5%


# ---------------------------------------------------------------- Exercise 5


class Reseeding:
    """Seeds everything again instead of capturing where the generators are."""

    def __init__(self, data):
        self.data = data.state_dict()

    def restore(self, data):
        random.seed(0)
        np.random.seed(0)
        torch.manual_seed(0)
        data.load_state_dict(self.data)


class GlobalGeneratorsOnly(check.RandomStateReference):
    def restore(self, data):
        check.restore_rng(self.generators)


class WithoutPythonRandom(check.RandomStateReference):
    def restore(self, data):
        python = random.getstate()
        super().restore(data)
        random.setstate(python)


class WithoutNumpy(check.RandomStateReference):
    def restore(self, data):
        numpy = np.random.get_state()
        super().restore(data)
        np.random.set_state(numpy)


class WithoutTorch(check.RandomStateReference):
    def restore(self, data):
        generator = torch.get_rng_state()
        super().restore(data)
        torch.set_rng_state(generator)


class KeepingTheDataGeneratorItself(check.RandomStateReference):
    """Holds on to the data source's generator object, which goes on drawing after capture."""

    def __init__(self, data):
        super().__init__(data)
        self.rng = data.rng

    def restore(self, data):
        check.restore_rng(self.generators)
        data.rng = self.rng


@pytest.mark.parametrize("wrong, hint", [
    (Reseeding, "differ"),
    (GlobalGeneratorsOnly, "data source"),
    (WithoutPythonRandom, "python random"),
    (WithoutNumpy, "numpy"),
    (WithoutTorch, "torch"),
    (KeepingTheDataGeneratorItself, "data source"),
], ids=lambda case: getattr(case, "__name__", None))
def test_random_state_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_random_state(wrong)


# ---------------------------------------------------------------- the lab as a whole


def test_an_unfinished_exercise_cannot_stop_the_model_save(capsys):
    """Later labs need the saved model: every exercise hands back llmlab's version when not done,
    and the cell that saves the model uses no exercise at all."""
    def stub(*args, **kwargs):
        raise NotImplementedError("the stub")

    for exercise_check in check.EXERCISES.values():
        assert exercise_check(stub).__module__.startswith("llmlab.")
    lab = nbformat.read(ROOT / "labs" / check.NOTEBOOK, as_version=4)
    code = [cell.source for cell in lab.cells if cell.cell_type == "code"]
    saving = next(i for i, source in enumerate(code) if "save_trained_model(" in source)
    assert "NotImplementedError" not in code[saving]
    assert not any(f"{name}(" in code[saving] for name in check.EXERCISES)
    for source in code[:saving]:  # a stub at the top level of a cell would stop Run All there
        assert not any(line.startswith("raise NotImplementedError") for line in source.splitlines())


# ---------------------------------------------------------------- Exercise 6


def frobenius(x):
    return x.norm().clamp(min=1e-7)  # a zero matrix stays zero


def iterate(matrix, steps=5, coefficients=COEFFICIENTS, norm=frobenius, transpose=True,
            back=True):
    """Newton-Schulz with a switch for each mistake a learner might make."""
    a, b, c = coefficients
    x = matrix.float()
    tall = matrix.shape[0] > matrix.shape[1]
    if tall and transpose:
        x = x.T
    if norm is not None:
        x = x / norm(x)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall and transpose and back else x


def like_torch_in_bf16(matrix, steps=5):
    """torch.optim.Muon's own way: bf16, addmm, a clamped norm."""
    a, b, c = COEFFICIENTS
    x = matrix.bfloat16()
    tall = x.shape[0] > x.shape[1]
    x = (x.T if tall else x) / x.norm().clamp(min=1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


def on_the_right_in_float64(matrix, steps=5):
    """X (a + b G + c G^2) with G = X^T X: the small Gram matrix of a tall X without a transpose
    (a wide one is transposed instead); float64, returned as a numpy array."""
    a, b, c = COEFFICIENTS
    wide = matrix.shape[0] < matrix.shape[1]
    x = matrix.double().T if wide else matrix.double()
    x = x / (x.norm() + 1e-12)
    for _ in range(steps):
        gram = x.T @ x
        x = a * x + x @ (b * gram + c * gram @ gram)
    return (x.T if wide else x).numpy()


def with_three_products(matrix, steps=5):
    """a X + b G X + c G (G X): no G^2."""
    a, b, c = COEFFICIENTS
    tall = matrix.shape[0] > matrix.shape[1]
    x = matrix.T if tall else matrix
    x = x / x.norm().clamp(min=1e-7)
    for _ in range(steps):
        gram = x @ x.T
        gx = gram @ x
        x = a * x + b * gx + c * gram @ gx
    return x.T if tall else x


@pytest.mark.parametrize("right", [
    newton_schulz, like_torch_in_bf16, on_the_right_in_float64, with_three_products,
], ids=lambda f: f.__name__)
def test_newton_schulz_accepts_every_correct_form(right, capsys):
    check.exercise_newton_schulz(right)
    assert "PASSED" in capsys.readouterr().out


def in_place(matrix, steps=5):
    """Normalises the caller's matrix itself."""
    tall = matrix.shape[0] > matrix.shape[1]
    matrix /= matrix.norm().clamp(min=1e-7)
    return iterate(matrix, steps) if not tall else iterate(matrix.T.contiguous(), steps).T


@pytest.mark.parametrize("wrong, hint", [
    (lambda m, steps=5: iterate(m, steps, norm=None), "divide the matrix by"),
    (lambda m, steps=5: iterate(m, steps, norm=lambda x: torch.linalg.matrix_norm(x, ord=2)),
     "divide the matrix by"),
    (lambda m, steps=5: iterate(m, steps, transpose=False), "which one does your loop square"),
    (lambda m, steps=5: iterate(m.T, steps, transpose=False).T if m.shape[0] < m.shape[1]
     else iterate(m, steps, transpose=False), "which one does your loop square"),
    (lambda m, steps=5: iterate(m, steps, back=False), "transposed back"),
    (lambda m, steps=5: iterate(m, steps, coefficients=(1.5, -0.5, 0.0)), "cubic"),
    (lambda m, steps=5: iterate(m, steps - 1), "4 steps"),
    (lambda m, steps=5: iterate(m), "5 steps"),
    (lambda m, steps=5: iterate(m, steps, norm=lambda x: x.norm()), "all zeros"),
    (in_place, "changed the matrix"),
], ids=["not normalised", "spectral norm", "no transpose", "wide transposed, not tall",
        "not transposed back", "cubic", "a step short", "steps ignored", "0/0", "in place"])
def test_newton_schulz_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_newton_schulz(wrong)
