"""llmlab.train.stall: a save's stall is timed in both modes, and each checkpoint holds the state
of its own step."""

import os

import pytest
import torch
from helpers.fake_clock import ManualClock

from llmlab.train.stall import _tensors, measure_stall, snapshot, stall_parts


def tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step():
        model(torch.randn(16, 64)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return model, optimizer, step


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_save_is_timed_and_holds_its_steps_state(mode, tmp_path):
    result = measure_stall(mode, *tiny(), tmp_path, steps=6, every=2)
    assert len(result.stalls) == len(result.waits) == 3 and len(result.step_seconds) == 6
    # the wait for the previous save is a part of the stall
    assert all(0 <= wait <= stall for wait, stall in zip(result.waits, result.stalls, strict=True))
    assert result.exact
    # weights and AdamW's two moments, fp32: at least 3 x 4 bytes per parameter
    assert result.checkpoint_bytes >= 3 * 4 * (64 * 64 + 64 + 64 * 8 + 8)
    assert result.row()["checkpoints exact"] is True


@pytest.mark.parametrize(("mode", "every", "message"),
                         [("later", 1, "mode 'later'"), ("sync", 0, "every=0")])
def test_wrong_arguments_are_errors(mode, every, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        measure_stall(mode, *tiny(), tmp_path, steps=2, every=every)


def test_the_parts_of_a_stall_are_timed_inside_the_real_save(tmp_path):
    model, optimizer, _ = tiny()
    real_save, real_fsync = torch.save, os.fsync
    # Each reading of the fake clock moves it 1 s: a wrapped call reads it twice, so each part
    # counts its calls, and the whole save spans them all.
    parts = stall_parts(model, optimizer, tmp_path, repeats=2, clock=ManualClock(tick=1.0))
    saves, fsyncs, rest, whole = parts.values()
    assert saves >= len(_tensors(snapshot(model, optimizer)))  # at least one per tensor
    assert fsyncs == 2  # the data file, then the metadata
    assert whole == 2 * (saves + fsyncs) + 1 and rest == whole - saves - fsyncs
    assert torch.save is real_save and os.fsync is real_fsync  # put back afterwards
    assert (tmp_path / "parts-1" / ".metadata").is_file()
