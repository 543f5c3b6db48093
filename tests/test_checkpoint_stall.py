"""llmlab.train.stall: a save's stall is timed in both modes, and each checkpoint holds the state
of its own step."""

import pytest
import torch

from llmlab.train.stall import measure_stall


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
    assert len(result.stalls) == 3 and len(result.step_seconds) == 6
    assert result.exact
    # weights and AdamW's two moments, fp32: at least 3 x 4 bytes per parameter
    assert result.checkpoint_bytes >= 3 * 4 * (64 * 64 + 64 + 64 * 8 + 8)
    assert result.row()["checkpoints exact"] is True


@pytest.mark.parametrize(("mode", "every", "message"),
                         [("later", 1, "mode 'later'"), ("sync", 0, "every=0")])
def test_wrong_arguments_are_errors(mode, every, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        measure_stall(mode, *tiny(), tmp_path, steps=2, every=every)
