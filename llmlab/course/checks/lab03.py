"""Checks for Lab 03 (training on one GPU), and the versions the lab falls back to."""

import copy
import functools
import math
import random

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from llmlab.course.checks import (
    ExerciseFailed,
    call,
    call_or_fail,
    exercise,
    expect_number,
    expect_real,
    is_close,
    passed,
    tensor_of_shape,
)
from llmlab.matmul import mfu
from llmlab.models import build_model, next_token_cross_entropy, preset, training_flops_per_token
from llmlab.train import TrainConfig, Trainer, learning_rate
from llmlab.train.checkpoint import capture_rng, restore_rng
from llmlab.train.muon import BF16_TOLERANCE, muon_update, newton_schulz

IGNORE = -100  # the target id cross-entropy skips (PyTorch's and Hugging Face's convention)
VOCAB, CONTEXT = 64, 24
NAN_HINT = ("Is there a micro-batch whose targets are all -100? Its mean loss is 0/0; what does "
            "the sum of its per-token losses give instead?")


# ---------------------------------------------------------------- Exercise 1: accumulation


def _tiny_model() -> torch.nn.Module:
    # build_model seeds the weights, so every call gives the same model.
    return build_model(preset("tiny", n_layer=1, d_model=32, n_head=2, vocab_size=VOCAB,
                              context=CONTEXT))


def _summed_loss(model, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return next_token_cross_entropy(model(inputs).logits, targets, reduction="sum")


def _counted(micro_batches) -> int:
    return sum(int((targets != IGNORE).sum()) for _, targets in micro_batches)


def accumulate_token_weighted(model, micro_batches) -> float:
    """llmlab's answer to Exercise 1 (the lab uses it when the exercise is not done)."""
    n_tokens = _counted(micro_batches)
    total = 0.0
    for inputs, targets in micro_batches:
        loss_sum = _summed_loss(model, inputs, targets)
        (loss_sum / n_tokens).backward()  # only this micro-batch's activations are alive
        total += loss_sum.item()
    return total / n_tokens


def _micro_batch(generator, rows: int, length: int, all_ignored: bool = False):
    """Random token rows; each row's targets skip a random prompt and a random padded tail."""
    inputs = torch.randint(0, VOCAB, (rows, length), generator=generator)
    targets = torch.randint(0, VOCAB, (rows, length), generator=generator)
    for row in range(rows):
        prompt = int(torch.randint(0, length // 2, (), generator=generator))
        padding = int(torch.randint(0, length // 3, (), generator=generator))
        targets[row, :prompt] = IGNORE
        targets[row, length - padding :] = IGNORE
    if all_ignored:
        targets[:] = IGNORE
    return inputs, targets


def _accumulation_cases():
    """Micro-batches of unequal rows and lengths, so weighting each one equally is wrong; the
    second case holds a micro-batch with no counted target (a prompt longer than its window)."""
    generator = torch.Generator().manual_seed(3)
    first = [_micro_batch(generator, r, t) for r, t in [(3, 20), (1, 6), (2, 14), (4, 9)]]
    second = [_micro_batch(generator, r, t, all_ignored=(t == 11))
              for r, t in [(2, 11), (1, 24), (3, 8)]]
    return [first, second]


def _one_big_batch(micro_batches):
    """Every micro-batch's rows in one batch, right-padded (inputs with 0, targets ignored)."""
    length = max(inputs.shape[1] for inputs, _ in micro_batches)
    inputs = [F.pad(x, (0, length - x.shape[1]), value=0) for x, _ in micro_batches]
    targets = [F.pad(y, (0, length - y.shape[1]), value=IGNORE) for _, y in micro_batches]
    return torch.cat(inputs), torch.cat(targets)


def _gradient(model) -> torch.Tensor:
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).flatten()
        for p in model.parameters()
    ])


def _gradient_of(loss_of_model) -> torch.Tensor:
    model = _tiny_model()
    loss_of_model(model).backward()
    return _gradient(model)


def _mistaken_gradients(micro_batches) -> dict[str, torch.Tensor]:
    """The gradients plausible mistakes leave, each with the message that explains it."""
    n_tokens = _counted(micro_batches)
    n_positions = sum(targets.numel() for _, targets in micro_batches)
    k = len(micro_batches)

    def per_batch_means(model):
        return sum(
            _summed_loss(model, x, y) / max(1, int((y != IGNORE).sum())) for x, y in micro_batches
        )

    return {
        f"the gradient is {n_tokens}x too big: the summed per-token losses must be divided by "
        "the number of counted tokens (of all micro-batches) before backward().":
            _gradient_of(lambda m: sum(_summed_loss(m, x, y) for x, y in micro_batches)),
        "each micro-batch's mean counts the same, so a micro-batch with few counted tokens "
        "weighs as much as one with many. One big batch weighs every token the same: weight "
        "each micro-batch by its number of counted tokens.":
            _gradient_of(lambda m: per_batch_means(m) / k),
        "the ignored positions (-100) were counted: divide by the number of targets that are "
        "not -100.":
            _gradient_of(lambda m: sum(_summed_loss(m, x, y) for x, y in micro_batches)
                         / n_positions),
        "only the last micro-batch's gradient is left: backward() adds to .grad, so do not "
        "zero the gradients between micro-batches.":
            _gradient_of(lambda m: _summed_loss(m, *micro_batches[-1]) / n_tokens),
    }


class _Recorder:
    """Watches the model's forwards and their backwards. A forward that runs before an earlier
    forward's backward() means several micro-batches' activations were in memory at once."""

    def __init__(self, model: torch.nn.Module):
        self.events: list[tuple[str, int]] = []  # ("forward", i) and ("backward", i)
        self.largest_rows = 0
        model.register_forward_hook(self._forward)

    def _forward(self, module, args, output) -> None:
        logits = getattr(output, "logits", output)
        if not logits.requires_grad:
            return  # under torch.no_grad(): nothing is kept for backward
        index = sum(kind == "forward" for kind, _ in self.events)
        self.events.append(("forward", index))
        self.largest_rows = max(self.largest_rows, logits.shape[0])
        logits.register_hook(lambda grad: self.events.append(("backward", index)))

    def overlapped(self) -> bool:
        """Whether some forward ran before an earlier forward's backward (a forward never
        followed by backward, say for a micro-batch with nothing to learn, is fine)."""
        forwards_seen = 0
        for kind, index in self.events:
            if kind == "forward":
                forwards_seen = index + 1
            elif forwards_seen > index + 1:
                return True
        return False


def _check_accumulation_case(name: str, accumulate, micro_batches) -> None:
    model = _tiny_model()
    recorder = _Recorder(model)
    got_loss = call(name, accumulate, model, micro_batches)
    if all(p.grad is None for p in model.parameters()):
        raise ExerciseFailed(
            f"{name}: no gradients after accumulate(): call backward() for each micro-batch."
        )
    if recorder.largest_rows > max(x.shape[0] for x, _ in micro_batches):
        raise ExerciseFailed(
            f"{name}: the model saw {recorder.largest_rows} rows at once: that is one big batch, "
            "not accumulation. Run each micro-batch through the model on its own."
        )
    if recorder.overlapped():
        raise ExerciseFailed(
            f"{name}: a micro-batch ran forward before the previous one's backward(), so their "
            "activations were all in memory together (for example, one backward() on the summed "
            "losses after the loop). Call backward() inside the loop, once per micro-batch."
        )
    inputs, targets = _one_big_batch(micro_batches)
    n_tokens = _counted(micro_batches)
    expected = _gradient_of(lambda m: _summed_loss(m, inputs, targets) / n_tokens)
    got = _gradient(model)
    tolerance = 1e-4 * float(expected.abs().max())
    if not torch.isfinite(got).all():
        raise ExerciseFailed(f"{name}: the gradient holds NaN. {NAN_HINT}")
    if not torch.allclose(got, expected, rtol=1e-3, atol=tolerance):
        for wrong, hint in ((g, h) for h, g in _mistaken_gradients(micro_batches).items()):
            if torch.allclose(got, wrong, rtol=1e-3, atol=tolerance):
                raise ExerciseFailed(f"{name}: {hint}")
        raise ExerciseFailed(
            f"{name}: the accumulated gradient differs from one big batch's (largest difference "
            f"{float((got - expected).abs().max()):.3g}). The targets are already shifted: pass "
            "only the inputs to the model, and compare each logit with its target."
        )
    with torch.no_grad():
        big_loss = _summed_loss(_tiny_model(), inputs, targets).item() / n_tokens
    call_text = f"accumulate() on micro-batches of {[tuple(x.shape) for x, _ in micro_batches]}"
    if math.isnan(expect_real(name, call_text, got_loss)):
        raise ExerciseFailed(f"{name}: {call_text} returned the loss NaN. {NAN_HINT}")
    if not is_close(got_loss, big_loss, rel=1e-4):
        raise ExerciseFailed(
            f"{name}: {call_text} returned the loss {got_loss!r}, expected about {big_loss:.6g}: "
            "the mean over every counted token of every micro-batch, as one big batch gives."
        )


@exercise(fallback=accumulate_token_weighted,
          fallback_name="llmlab.course.checks.lab03.accumulate_token_weighted")
def exercise_accumulation(accumulate) -> None:
    """Exercise 1: accumulate(model, micro_batches) leaves one big batch's gradient and loss."""
    name = "Exercise 1 (token-weighted gradient accumulation)"
    for micro_batches in _accumulation_cases():
        _check_accumulation_case(name, accumulate, micro_batches)
    passed(name, "micro-batches of unequal lengths give one big batch's gradient, one "
                 "micro-batch in memory at a time")


# ---------------------------------------------------------------- Exercise 2: the whole step

STEP_SCALE = 2.0**12  # a power of 2: scaling and unscaling fp32 gradients by it is exact
STEP_LR = 0.1  # plain SGD, so the weights move by exactly the clipped gradient


# The calls a step with a loss scaler makes, each with what it is for (the gradients may be
# cleared through the optimizer or the model).
STEP_CALLS = {
    "scaler.scale(loss)": "each loss scaled before backward(), so small fp16 gradients survive",
    "scaler.unscale_(optimizer)": "the true gradients back before they are clipped and measured",
    "scaler.step(optimizer)": "an update that is skipped when a gradient overflowed",
    "scaler.update()": "the scale grown after good steps, shrunk after an overflow",
    "optimizer.zero_grad()": "gradients cleared once per step, since backward() adds to .grad",
}


class _CallSpy:
    """Notes which of STEP_CALLS a step makes, through the scaler, optimizer and model it is
    given. A call a noted method makes itself (scaler.step unscales when nobody did) is not the
    learner's, so it is not noted."""

    def __init__(self, scaler, optimizer, model):
        self.made: set[str] = set()
        self._inside = False
        for owner, method, label in ((scaler, "scale", "scaler.scale(loss)"),
                                     (scaler, "unscale_", "scaler.unscale_(optimizer)"),
                                     (scaler, "step", "scaler.step(optimizer)"),
                                     (scaler, "update", "scaler.update()"),
                                     (optimizer, "zero_grad", "optimizer.zero_grad()"),
                                     (model, "zero_grad", "optimizer.zero_grad()")):
            setattr(owner, method, self._noting(getattr(owner, method), label))

    def _noting(self, method, label: str):
        @functools.wraps(method)
        def noted(*args, **kwargs):
            if self._inside:
                return method(*args, **kwargs)
            self.made.add(label)
            self._inside = True
            try:
                return method(*args, **kwargs)
            finally:
                self._inside = False

        return noted

    def missing(self) -> list[str]:
        return [label for label in STEP_CALLS if label not in self.made]


def _missing_calls_failure(failure: ExerciseFailed, name: str, text: str, missing: list[str]):
    """The failure, or, when the step skipped some of STEP_CALLS, one that names all of them."""
    if not missing:
        return failure
    named = [f"{label} ({STEP_CALLS[label]})" for label in missing]
    listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"
    return ExerciseFailed(f"{name}: {text} never called {listed}. Each is needed once per step.")


class _Batches:
    """The given micro-batches, one per next_batch(): all a Trainer's step asks of its data."""

    def __init__(self, micro_batches):
        self.batches = iter(micro_batches)

    def next_batch(self):
        return next(self.batches)


def trainer_step(model, optimizer, scaler, micro_batches, max_norm):
    """llmlab.train.Trainer.train_step with Exercise 2's arguments: the lab's fallback and the
    check's reference. The learning rate stays the optimizer's (a constant schedule)."""
    inputs, _ = micro_batches[0]
    config = TrainConfig(
        max_steps=1, micro_batch_size=inputs.shape[0], seq_len=inputs.shape[1],
        grad_accum_steps=len(micro_batches), lr=optimizer.param_groups[0]["lr"],
        schedule="constant", warmup_steps=0, dtype="fp32", device="cpu", progress=False,
        grad_clip=None if math.isinf(max_norm) else max_norm,
    )
    generators = capture_rng()  # the Trainer seeds every generator: give the caller's back
    trainer = Trainer(model, config, _Batches(micro_batches))
    restore_rng(generators)
    trainer.optimizer, trainer.scaler = optimizer, scaler
    return trainer.train_step()


def _scaler() -> torch.amp.GradScaler:
    # growth_interval=1: every good step doubles the scale, so a missing update() shows.
    return torch.amp.GradScaler("cpu", init_scale=STEP_SCALE, growth_interval=1)


def _overflowing(model: torch.nn.Module) -> torch.nn.Module:
    """The model, with one parameter whose gradient comes out inf, as an fp16 one can."""
    next(model.parameters()).register_hook(lambda grad: torch.full_like(grad, math.inf))
    return model


def _step_cases():
    """(two steps' micro-batches, max_norm, overflow): the trainer's equal-shape windows."""
    generator = torch.Generator().manual_seed(7)

    def batches(k: int, rows: int, length: int):
        return [tuple(torch.randint(0, VOCAB, (rows, length), generator=generator)
                      for _ in range(2)) for _ in range(k)]

    return [
        ([batches(3, 2, 12), batches(3, 2, 12)], 0.05, False),  # clipping at work
        ([batches(1, 4, 16), batches(1, 4, 16)], math.inf, False),  # one micro-batch, no clip
        ([batches(2, 3, 10), batches(2, 3, 10)], 1e3, False),  # a limit the norm stays under
        ([batches(2, 2, 8), batches(2, 2, 8)], 1.0, True),  # overflowed: both steps skipped
    ]


def _read_step_answer(name: str, text: str, got) -> tuple[float, float]:
    if not (isinstance(got, tuple | list) and len(got) == 2):
        raise ExerciseFailed(f"{name}: {text} returned {got!r}; return a pair (the mean loss, "
                             "the gradient norm before clipping).")
    return expect_real(name, text + "[0]", got[0]), expect_real(name, text + "[1]", got[1])


def _norm_hint(got: float, expected: float, k: int, max_norm: float) -> str:
    wrong = [
        (expected * STEP_SCALE, f"That norm is {STEP_SCALE:g}x the true one: it was measured on "
         "the scaled gradients. Unscale them (scaler.unscale_) before clipping."),
        (expected * k, f"That norm is {k}x the true one: divide each micro-batch's loss by the "
         "number of micro-batches."),
        (min(expected, max_norm), "That is the norm after clipping: return the one before "
         "(clip_grad_norm_ returns it), which says how far the gradient was clipped."),
    ]
    return next((text for value, text in wrong if is_close(got, value, 1e-4)), "")


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _check_step(name, text, got, expected, k, max_norm, overflow) -> None:
    loss, norm = _read_step_answer(name, text, got)
    want_loss, want_norm = float(expected[0]), float(expected[1])
    if not overflow and not is_close(norm, want_norm, 1e-4):
        raise ExerciseFailed(f"{name}: {text} returned the gradient norm {norm!r}, expected "
                             f"about {want_norm:.6g}. {_norm_hint(norm, want_norm, k, max_norm)}"
                             .strip())
    if not is_close(loss, want_loss, 1e-5):
        hint = next((h for factor, h in [
            (k, "That is the sum over the micro-batches: return their mean."),
            (STEP_SCALE, "That is the scaled loss: return the loss itself."),
        ] if is_close(loss, want_loss * factor, 1e-5)), "")
        raise ExerciseFailed(f"{name}: {text} returned the loss {loss!r}, expected about "
                             f"{want_loss:.6g}. {hint}".strip())


def _check_step_case(name: str, train_step, steps, max_norm: float, overflow: bool) -> None:
    reference, mine = _tiny_model(), _tiny_model()
    if overflow:
        reference, mine = _overflowing(reference), _overflowing(mine)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=STEP_LR)
    optimizer = torch.optim.SGD(mine.parameters(), lr=STEP_LR)
    reference_scaler, scaler = _scaler(), _scaler()
    recorder = _Recorder(mine)
    spy = _CallSpy(scaler, optimizer, mine)
    start = _weights(mine)
    for step, micro_batches in enumerate(steps, 1):
        k = len(micro_batches)
        text = (f"train_step(model, optimizer, scaler, {k} micro-batch{'es' * (k > 1)} of "
                f"{tuple(micro_batches[0][0].shape)}, max_norm={max_norm}) (step {step})")
        expected = trainer_step(reference, reference_optimizer, reference_scaler, micro_batches,
                                max_norm)
        stale = any(p.grad is not None and bool(p.grad.any()) for p in mine.parameters())
        spy.made.clear()
        got = call_or_fail(name, text, train_step, mine, optimizer, scaler, micro_batches,
                           max_norm)
        try:
            _check_step_effects(name, text, got, expected, k, max_norm, overflow, recorder,
                                (mine, reference), (scaler, reference_scaler), start, stale)
        except ExerciseFailed as failure:
            # A missing call is the cause of the symptom found first: name every one at once.
            raise _missing_calls_failure(failure, name, text, spy.missing()) from None


def _check_step_effects(name, text, got, expected, k, max_norm, overflow, recorder, models,
                        scalers, start, stale) -> None:
    """The learner's step against the reference's: activations, loss, norm, weights, scale."""
    (mine, reference), (scaler, reference_scaler) = models, scalers
    if recorder.overlapped():
        raise ExerciseFailed(
            f"{name}: {text}: a micro-batch ran forward before the previous one's backward(), "
            "so their activations were all in memory together. Call backward() once per "
            "micro-batch, inside the loop."
        )
    _check_step(name, text, got, expected, k, max_norm, overflow)
    if overflow and not torch.equal(_weights(mine), start):
        raise ExerciseFailed(
            f"{name}: {text}: a gradient overflowed (it is inf), yet the weights changed. "
            "Step with scaler.step(optimizer): it skips the update when unscale_ found inf "
            "or NaN, where optimizer.step() would write them into the weights."
        )
    difference = float((_weights(mine) - _weights(reference)).abs().max())
    if not overflow and difference > 1e-6:
        hint = ("backward() adds to .grad: clear the gradients once per step "
                "(optimizer.zero_grad()), or the last step's gradient comes back."
                if stale else "Clip the unscaled gradients to max_norm, then step with "
                "scaler.step(optimizer).")
        raise ExerciseFailed(f"{name}: {text}: the weights after the step differ from "
                             f"llmlab's Trainer.train_step's by up to {difference:.3g}. "
                             f"{hint}")
    if scaler.get_scale() != reference_scaler.get_scale():
        raise ExerciseFailed(
            f"{name}: {text}: the loss scale is {scaler.get_scale():g} after the step, "
            f"expected {reference_scaler.get_scale():g}. Call scaler.update() once per step: "
            "it grows the scale after good steps and shrinks it after an overflow."
        )


@exercise(fallback=trainer_step, fallback_name="llmlab.train.Trainer.train_step")
def exercise_train_step(train_step) -> None:
    """Exercise 2: train_step(model, optimizer, scaler, micro_batches, max_norm) -> (mean loss,
    gradient norm before clipping), the weights as llmlab's Trainer.train_step leaves them."""
    name = "Exercise 2 (the whole training step)"
    for steps, max_norm, overflow in _step_cases():
        _check_step_case(name, train_step, steps, max_norm, overflow)
    passed(name, "two steps each on a tiny model: the same weights, norm, loss and loss scale "
                 "as llmlab's Trainer.train_step, an overflowed step skipped")


# ---------------------------------------------------------------- Exercise 3: the schedule


def warmup_cosine_reference(step, max_steps, warmup_steps, lr, min_lr) -> float:
    """llmlab's schedule (llmlab.train.learning_rate) with Exercise 3's arguments."""
    config = TrainConfig(max_steps=max_steps, warmup_steps=warmup_steps, lr=lr,
                         min_lr_ratio=min_lr / lr)
    return learning_rate(step, config)


def _warmup_values(step: int, warmup: int, lr: float) -> list[float]:
    # Warm-up conventions differ by one step (start at 0, or reach lr one step early): all fine.
    return [lr * step / warmup, lr * (step + 1) / warmup, lr * (step + 1) / (warmup + 1)]


def _schedule_cases() -> list[tuple[int, int, float, float]]:
    """(max_steps, warmup, lr, min_lr): random warm-up lengths, no warm-up, a zero floor."""
    rng = random.Random(11)
    cases = [(100, 10, 1e-3, 1e-4), (60, 0, 3e-4, 3e-5), (500, 37, 6e-4, 0.0)]
    for _ in range(3):
        warmup = rng.randint(2, 60)
        lr = rng.uniform(1e-4, 1e-2)
        cases.append((warmup + rng.randint(5, 400), warmup, lr, lr * rng.uniform(0.0, 0.3)))
    return cases


@exercise(fallback=warmup_cosine_reference, fallback_name="llmlab.train.learning_rate")
def exercise_warmup_cosine(warmup_cosine) -> None:
    """Exercise 3: warmup_cosine(step, max_steps, warmup_steps, lr, min_lr), at every step."""
    name = "Exercise 3 (warm-up then cosine)"
    for max_steps, warmup, lr, min_lr in _schedule_cases():
        for step in range(max_steps + 1):
            args = f"warmup_cosine({step}, {max_steps}, {warmup}, {lr:.4g}, {min_lr:.4g})"
            got = expect_real(name, args, call(name, warmup_cosine, step, max_steps, warmup,
                                               lr, min_lr))
            if step < warmup:
                accepted = _warmup_values(step, warmup, lr)
                hint = (f"Step {step} is {step / warmup:.0%} of the way through the warm-up: the "
                        "rate should have grown in proportion, from about 0 towards lr.")
            else:
                accepted = [warmup_cosine_reference(step, max_steps, warmup, lr, min_lr)]
                progress = (step - warmup) / max(1, max_steps - warmup)
                hint = (f"Step {step} is {progress:.0%} of the way from the end of the warm-up "
                        "to max_steps: a half cosine goes from lr there to min_lr at max_steps "
                        "(half-way, it is half-way between them).")
            if not any(is_close(got, value, rel=1e-6, abs_tol=1e-12) for value in accepted):
                raise ExerciseFailed(
                    f"{name}: {args} returned {got!r}, expected about {accepted[-1]:.6g}. {hint}"
                )
    passed(name, "every step of six schedules: linear warm-up, then a half cosine to min_lr")


# ---------------------------------------------------------------- Exercise 4: MFU


def mfu_reference(tokens_per_s, flops_per_token, peak_tflops) -> float:
    """llmlab.matmul.mfu with the peak in TFLOP/s, as Exercise 4 takes it."""
    return mfu(tokens_per_s, flops_per_token, peak_tflops * 1e12)


@exercise(fallback=mfu_reference, fallback_name="llmlab.matmul.mfu")
def exercise_mfu(model_flops_utilization) -> None:
    """Exercise 4: MFU from tokens/s, FLOPs per token and the peak in TFLOP/s (a fraction)."""
    name = "Exercise 4 (MFU)"
    gpt2_small = training_flops_per_token("gpt2-124m", 1024).total  # the course's own count
    cases = [(1.0e5, gpt2_small, 989.0), (4500.0, 3.31e7, 0.9), (np.float32(2.5e4), 6e8, 312)]
    for tokens_per_s, flops_per_token, peak in cases:
        got = call(name, model_flops_utilization, tokens_per_s, flops_per_token, peak)
        expect_number(
            name,
            f"model_flops_utilization({tokens_per_s:g}, {flops_per_token:.4g}, {peak})",
            got,
            mfu_reference(float(tokens_per_s), flops_per_token, peak),
            mistakes=[
                (100.0, "Return a fraction (0.4 for 40%), not a percentage."),
                (1e12, "The peak is in TFLOP/s: how many FLOP/s is one TFLOP/s?"),
                (1e3, "Tera means 10 to the power 12 (giga is 9)."),
            ],
        )
    expected = mfu_reference(1.0e5, gpt2_small, 989.0)
    passed(name, f"GPT-2 small (seq 1024) at 100k tokens/s on an H100 SXM (bf16) is "
                 f"{expected:.1%} MFU")


# ---------------------------------------------------------------- Exercise 5: resumable RNG


class RandomStateReference:
    """llmlab's answer to Exercise 5, from llmlab.train.checkpoint.capture_rng/restore_rng."""

    def __init__(self, data):
        self.generators = capture_rng()
        self.data = copy.deepcopy(data.state_dict())

    def restore(self, data) -> None:
        restore_rng(self.generators)
        data.load_state_dict(copy.deepcopy(self.data))


class _Windows:
    """A batch source with its own generator, as llmlab.data.loaders.RandomWindows has."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        window = torch.from_numpy(self.rng.integers(0, VOCAB, (2, 6)))
        return window[:, :-1], window[:, 1:]

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


SOURCES = {
    "the data source": "it has a generator of its own: save its state_dict() too.",
    "torch": "dropout and torch.rand draw from torch's generator: save its state.",
    "numpy": "numpy's global generator (np.random.rand, np.random.shuffle) has a state too.",
    "python random": "Python's own `random` module has a state too (random.getstate).",
    "cuda": "each GPU has its own generator: torch.cuda has functions to get and set them all.",
}


def _step_draws(data) -> dict[str, list]:
    """What one training step might draw: a batch, dropout, and numpy's and Python's draws."""
    draws = {
        "the data source": data.next_batch()[0].tolist(),
        "torch": torch.rand(3).tolist(),
        "numpy": np.random.rand(3).tolist(),
        "python random": [random.random() for _ in range(3)],
    }
    if torch.cuda.is_available():
        draws["cuda"] = torch.rand(3, device="cuda").tolist()
    return draws


def _first_difference(expected: list[dict], got: list[dict]) -> str | None:
    for source in SOURCES:
        if any(e.get(source) != g.get(source) for e, g in zip(expected, got, strict=True)):
            return source
    return None


def _reseed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@exercise(fallback=RandomStateReference,
          fallback_name="llmlab.train.checkpoint.capture_rng / restore_rng")
def exercise_random_state(random_state) -> None:
    """Exercise 5: RandomState(data) captures; .restore(data) continues bit for bit."""
    name = "Exercise 5 (an exactly resumable random state)"
    _reseed_everything(1234)
    data = _Windows(seed=5)
    for _ in range(3):  # part-way through a run, not just after seeding
        _step_draws(data)
    saved = call(name, random_state, data)
    expected = [_step_draws(data) for _ in range(4)]
    for attempt in ("once", "a second time"):
        for _ in range(5):  # the run goes on, then a new run seeds everything again
            _step_draws(data)
        _reseed_everything(99)
        fresh = _Windows(seed=77)  # a resumed run builds its own data source
        call(name, saved.restore, fresh)
        got = [_step_draws(fresh) for _ in range(4)]
        source = _first_difference(expected, got)
        if source is not None:
            raise ExerciseFailed(
                f"{name}: after restore() ({attempt}) the draws from {source} differ from those "
                f"right after the capture: {SOURCES[source]}"
            )
    passed(name, "a restored state continues bit for bit, into a fresh data source, twice")


# ---------------------------------------------------------------- Exercise 6: Muon's iteration


def _newton_schulz_cases() -> list[torch.Tensor]:
    """Random gradients, each at its own scale (Muon's update must not depend on it): wide,
    tall, square, two long enough that the larger Gram matrix costs 100x the smaller, and zeros
    (a weight the loss did not use)."""
    generator = torch.Generator().manual_seed(6)
    shapes = [((32, 96), 1e-3), ((96, 32), 50.0), ((48, 48), 1.0), ((384, 24), 1e3),
              ((24, 384), 0.1)]
    cases = [torch.randn(shape, generator=generator) * scale for shape, scale in shapes]
    return [*cases, torch.zeros(40, 16)]


def _gap(got: torch.Tensor, expected: torch.Tensor) -> float:
    """Relative distance (Frobenius), or the largest entry's size when zeros are expected."""
    if not expected.any():
        return float(got.abs().max())
    return float((got - expected).norm() / expected.norm())


def _newton_schulz_hint(got: torch.Tensor, matrix: torch.Tensor, steps: int) -> str:
    """What the learner's wrong result is closest to: torch's iteration with another number of
    steps, or the cubic's coefficients; else where its singular values lie."""
    for other in [s for s in range(1, 11) if s != steps]:
        if _gap(got, muon_update(matrix, ns_steps=other)) <= BF16_TOLERANCE:
            return f"That is {other} steps of the iteration: does your loop run `steps` times?"
    if _gap(got, muon_update(matrix, ns_steps=steps, ns_coefficients=(1.5, -0.5, 0.0))) <= (
            BF16_TOLERANCE):
        return ("Those are the cubic Newton-Schulz iteration's coefficients. Muon's quintic has "
                "other ones: which does torch.optim.Muon take (its ns_coefficients)?")
    values = torch.linalg.svdvals(got)
    return (f"Your result's singular values run from {float(values.min()):.3g} to "
            f"{float(values.max()):.3g}, where Muon's lie in a band around 1. Which norm does "
            "torch.optim.Muon divide the matrix by first, and which coefficients does it use?")


def _check_newton_schulz_case(name: str, newton_schulz_fn, matrix: torch.Tensor,
                              steps: int) -> None:
    """One call against torch.optim.Muon's update: its shape, values and cost."""
    rows, cols = matrix.shape
    options = {} if steps == 5 else {"steps": steps}  # 5: the default of the learner's signature
    text = f"newton_schulz(<a {rows} x {cols} matrix>{f', steps={steps}' if options else ''})"
    original = matrix.clone()
    with FlopCounterMode(display=False) as flops:
        got = call_or_fail(name, text, newton_schulz_fn, matrix, **options)
    if rows != cols and tuple(getattr(got, "shape", ())) == (cols, rows):
        raise ExerciseFailed(f"{name}: {text} returned a {cols} x {rows} matrix: a matrix you "
                             "transpose to iterate on has to be transposed back at the end.")
    got = tensor_of_shape(name, text, got, (rows, cols), "a matrix", "the input's").float()
    if not torch.equal(matrix, original):
        raise ExerciseFailed(f"{name}: {text} changed the matrix it was given (in Muon, a "
                             "gradient's momentum): compute on a copy instead of in place.")
    if not torch.isfinite(got).all():
        hint = ("A gradient can be all zeros (a weight the loss did not use): what does dividing "
                "it by its norm give?" if not matrix.any() else
                "Did every singular value start at most 1? Above 1, the iteration blows up.")
        raise ExerciseFailed(f"{name}: {text} returned inf or NaN. {hint}")
    gap = _gap(got, muon_update(matrix, ns_steps=steps))
    if gap > BF16_TOLERANCE and not matrix.any():
        raise ExerciseFailed(f"{name}: {text} returned entries up to {gap:.3g}, expected zeros: "
                             "a zero gradient moves nothing.")
    if gap > BF16_TOLERANCE:
        raise ExerciseFailed(f"{name}: {text} is {gap:.1%} away from torch.optim.Muon's update "
                             f"(at most {BF16_TOLERANCE:.0%}, its bf16 rounding, is accepted). "
                             f"{_newton_schulz_hint(got, matrix, steps)}")
    small, large = sorted(matrix.shape)
    # An iteration on the small Gram matrix: the Gram matrix, its square and two products with
    # the matrix per step; twice that leaves room for any sensible form.
    bound = 2 * steps * (6 * small * small * large + 2 * small**3)
    if flops.get_total_flops() > bound:
        raise ExerciseFailed(
            f"{name}: {text} multiplied matrices for {flops.get_total_flops() / 1e6:.0f} MFLOP, "
            f"over {bound / 1e6:.0f} MFLOP: the result is right, the cost is not. A {large} x "
            f"{small} matrix has two Gram matrices, {large} x {large} and {small} x {small}: "
            "which one does your loop square?"
        )


@exercise(fallback=newton_schulz, fallback_name="llmlab.train.muon.newton_schulz")
def exercise_newton_schulz(newton_schulz_fn) -> None:
    """Exercise 6: newton_schulz(matrix, steps=5), Muon's orthogonalisation, against
    torch.optim.Muon's update (in bf16: within BF16_TOLERANCE) on random matrices, at the
    default 5 steps and at 3, computed on the smaller Gram matrix."""
    name = "Exercise 6 (Muon's Newton-Schulz iteration)"
    for matrix in _newton_schulz_cases():
        for steps in (5, 3):
            _check_newton_schulz_case(name, newton_schulz_fn, matrix, steps)
    passed(name, f"within {BF16_TOLERANCE:.0%} of torch.optim.Muon's update (bf16) on wide, "
                 "tall, square and zero gradients at 5 and 3 steps, on the smaller Gram matrix")


NOTEBOOK = "03_training.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "accumulate": exercise_accumulation,
    "train_step": exercise_train_step,
    "warmup_cosine": exercise_warmup_cosine,
    "model_flops_utilization": exercise_mfu,
    "RandomState": exercise_random_state,
    "newton_schulz": exercise_newton_schulz,
}
