"""fp16 with a grad scaler (the path of every GPU before Ampere), run on a CPU: a non-finite step
is dropped, the loss scale drops, and training goes on; the stop policy still stops."""

import math

import pytest
from helpers.train_fakes import NaNAt, RandomWindows, config, tiny_gpt2, token_stream

from llmlab.models import build_model, preset
from llmlab.train import Trainer, TrainingDiverged


def fp16_trainer(model, **overrides) -> Trainer:
    trainer = Trainer(model, config(dtype="fp16", eval_interval=100, **overrides),
                      RandomWindows(token_stream(), 4))
    assert trainer.scaler.is_enabled()  # torch.amp.GradScaler("cpu"), as on a T4 or V100
    return trainer


def test_fp16_skip_drops_the_bad_step_lowers_the_scale_and_goes_on():
    trainer = fp16_trainer(NaNAt(tiny_gpt2(), bad_call=3, once=True), max_steps=5,
                           nan_policy="skip")
    scales = []
    trainer.callbacks.append(lambda metrics: scales.append(trainer.scaler.get_scale()))
    history = trainer.fit().history
    assert [m.skipped for m in history] == [False, False, True, False, False]
    assert scales[2] == scales[1] / 2  # the scaler backed off after the non-finite step
    assert all(math.isfinite(m.loss) for m in history[3:])  # the steps after it trained
    assert all(math.isfinite(p.sum().item()) for p in trainer.model.parameters())


def test_fp16_stop_policy_raises_at_the_first_non_finite_step():
    trainer = fp16_trainer(NaNAt(tiny_gpt2(), bad_call=2), max_steps=4)
    with pytest.raises(TrainingDiverged, match="step 2"):
        trainer.fit()
    assert trainer.step == 1


def test_the_smoke_model_trains_in_fp16_with_accumulation_as_on_a_t4():
    """The consumer profile's path on a GPU without bf16 (fp16 autocast, a grad scaler, and
    accumulation over micro-batches), on the CPU with the smoke model: no step skipped, every
    loss finite, and the weights moved."""
    model = build_model(preset("tiny"))
    before = [p.detach().clone() for p in model.parameters()]
    trainer = fp16_trainer(model, max_steps=3, grad_accum_steps=2)
    history = trainer.fit().history
    assert [m.skipped for m in history] == [False, False, False]
    assert all(math.isfinite(m.loss) for m in history)
    assert all(not p.equal(q) for p, q in zip(trainer.model.parameters(), before, strict=True))
