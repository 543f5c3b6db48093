"""The trainer: accumulation, checkpoints, exact resume, refusals and the NaN stop."""

import json
import math

import pytest
import torch
from helpers.train_fakes import (
    FixedRows,
    NaNAt,
    RandomWindows,
    config,
    global_rows,
    tiny_gpt2,
    token_stream,
)

from llmlab.train import (
    CheckpointMismatch,
    Trainer,
    TrainingDiverged,
    best_checkpoint,
    latest_checkpoint,
    load_checkpoint,
)
from llmlab.train import checkpoint as checkpoint_module

# ---------------------------------------------------------------- the step


def record_gradients(trainer) -> list[torch.Tensor]:
    """The gradient the optimizer sees just before each of its steps."""
    gradients = []

    def hook(optimizer, args, kwargs):
        gradients.append(torch.cat([p.grad.flatten() for p in trainer.model.parameters()]))

    trainer.optimizer.register_step_pre_hook(hook)
    return gradients


def test_accumulated_micro_batches_give_the_same_gradient_as_one_big_batch():
    """k micro-batches of b rows, each loss divided by k, sum to the gradient of k*b rows."""
    rows = global_rows(8)
    runs = []
    for micro, accum in [(8, 1), (2, 4)]:
        c = config(micro_batch_size=micro, grad_accum_steps=accum, max_steps=2)
        trainer = Trainer(tiny_gpt2(), c, FixedRows(rows, micro))
        gradients = record_gradients(trainer)
        runs.append(([m.loss for m in trainer.fit().history], gradients))
    (big_losses, big_grads), (small_losses, small_grads) = runs
    assert small_losses == pytest.approx(big_losses, rel=1e-5)
    for small, big in zip(small_grads, big_grads, strict=True):
        torch.testing.assert_close(small, big, rtol=1e-4, atol=1e-6)  # float sum order


def test_training_lowers_the_validation_loss():
    tokens = token_stream(2048)
    pattern = tokens[:64].repeat(32)  # a repeating stream: learnable in a few steps
    trainer = Trainer(tiny_gpt2(), config(max_steps=30, eval_interval=10),
                      RandomWindows(pattern, 8), RandomWindows(pattern, 8, seed=1))
    before = trainer.evaluate()
    result = trainer.fit()
    assert result.val_loss < before - 1.0
    assert result.perplexity == pytest.approx(math.exp(result.val_loss))


# ---------------------------------------------------------------- checkpoints


def test_metrics_are_written_as_jsonl_and_csv(tmp_path):
    Trainer(tiny_gpt2(), config(out_dir=tmp_path), RandomWindows(token_stream(), 4)).fit()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4, 5, 6]
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "memory_gb"} <= set(header)


def run_with_checkpoints(out_dir, stop_at: int | None = None):
    """12 steps with dropout and random windows, checkpointing every 4; optionally killed."""

    class Killed(Exception):
        pass

    def kill(metrics):
        if metrics.step == stop_at:
            raise Killed

    c = config(max_steps=12, checkpoint_interval=4, out_dir=out_dir)
    trainer = Trainer(tiny_gpt2(dropout=0.1), c, RandomWindows(token_stream(), 4), callbacks=[kill])
    try:
        return trainer.fit().history
    except Killed:
        return None


def test_a_killed_and_resumed_run_reproduces_the_uninterrupted_losses_bit_for_bit(tmp_path):
    straight = run_with_checkpoints(tmp_path / "straight")
    assert run_with_checkpoints(tmp_path / "killed", stop_at=7) is None  # after the step-4 save
    assert latest_checkpoint(tmp_path / "killed" / "checkpoints").name == "step_0000004"
    # A new process would build a fresh model (another init) and resume.
    c = config(max_steps=12, checkpoint_interval=4, out_dir=tmp_path / "killed")
    resumed = Trainer(tiny_gpt2(dropout=0.1, seed=99), c, RandomWindows(token_stream(), 4, seed=5))
    history = resumed.fit(resume=True).history
    assert [m.step for m in history] == list(range(5, 13))
    assert [m.loss for m in history] == [m.loss for m in straight[4:]]  # exact, not approx


def test_a_save_killed_half_way_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch):
    trainer = Trainer(tiny_gpt2(), config(max_steps=2, out_dir=tmp_path),
                      RandomWindows(token_stream(), 4))
    trainer.fit()
    root = tmp_path / "checkpoints"
    assert latest_checkpoint(root).name == "step_0000002"

    def killed_mid_write(*args, **kwargs):
        raise KeyboardInterrupt("killed while writing state.pt")

    trainer.step = 3
    monkeypatch.setattr(checkpoint_module.torch, "save", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        trainer.save()
    monkeypatch.undo()
    assert latest_checkpoint(root).name == "step_0000002"  # the half-written one is ignored
    state = load_checkpoint(root / "step_0000002", tiny_gpt2())
    assert state["step"] == 2
    trainer.step = 4
    assert trainer.save().name == "step_0000004"  # a later save is not confused by the debris


def test_keep_last_prunes_old_checkpoints_but_keeps_the_best(tmp_path):
    trainer = Trainer(tiny_gpt2(), config(out_dir=tmp_path, keep_last=1),
                      RandomWindows(token_stream(), 4))
    for step, val_loss in [(1, 3.0), (2, 2.0), (3, 2.5), (4, 2.6)]:
        trainer.step = step
        trainer.save(val_loss)
    root = tmp_path / "checkpoints"
    kept = sorted(p.name for p in root.iterdir() if p.name.startswith("step_"))
    assert kept == ["step_0000002", "step_0000004"]
    assert best_checkpoint(root).name == "step_0000002"


def test_a_checkpoint_from_another_model_is_refused_with_the_fields_that_differ(tmp_path):
    trainer = Trainer(tiny_gpt2(width=32), config(max_steps=1, out_dir=tmp_path),
                      RandomWindows(token_stream(), 4))
    path = trainer.fit().checkpoint
    other = tiny_gpt2(width=64)
    before = other.transformer.wte.weight.clone()
    with pytest.raises(CheckpointMismatch, match=r"config\.n_embd: checkpoint 32, model 64"):
        load_checkpoint(path, other)
    assert torch.equal(other.transformer.wte.weight, before)  # nothing was loaded


# ---------------------------------------------------------------- NaN


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    model = NaNAt(tiny_gpt2(), bad_call=4)
    trainer = Trainer(model, config(max_steps=6, checkpoint_interval=2, out_dir=tmp_path,
                      eval_interval=100), RandomWindows(token_stream(), 4))
    with pytest.raises(TrainingDiverged, match="step 4.*step_0000002"):
        trainer.fit()
    assert latest_checkpoint(tmp_path / "checkpoints").name == "step_0000002"


def test_nan_policy_skip_drops_the_bad_step_and_goes_on():
    model = NaNAt(tiny_gpt2(), bad_call=3, once=True)
    trainer = Trainer(model, config(max_steps=5, nan_policy="skip", eval_interval=100),
                      RandomWindows(token_stream(), 4))
    history = trainer.fit().history
    assert [m.skipped for m in history] == [False, False, True, False, False]
    assert all(math.isfinite(p.sum().item()) for p in model.parameters())


def test_gradient_checkpointing_keeps_the_losses_and_stores_fewer_activations():
    from llmlab.memory.measure import measure_training_step

    runs = {}
    for checkpointing in (False, True):
        trainer = Trainer(tiny_gpt2(), config(gradient_checkpointing=checkpointing, max_steps=3),
                          FixedRows(global_rows(8), 8))
        losses = [m.loss for m in trainer.fit().history]
        step = measure_training_step(trainer.model, trainer.optimizer, global_rows(8)[:, :-1])
        runs[checkpointing] = (losses, step.activations)
    assert runs[True][0] == pytest.approx(runs[False][0], rel=1e-5)
    assert runs[True][1] < 0.7 * runs[False][1]


def test_tensorboard_without_the_package_says_how_to_get_it(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    trainer = Trainer(tiny_gpt2(), config(tensorboard=True, out_dir=tmp_path),
                      RandomWindows(token_stream(), 4))
    with pytest.raises(ImportError, match="pip install tensorboard"):
        trainer.fit()
