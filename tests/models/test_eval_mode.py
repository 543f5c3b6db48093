import pytest
import torch
from helpers.definitions import PACKAGE, mode_toggles

from llmlab.models import eval_mode


@pytest.mark.parametrize("training", [True, False])
def test_the_block_runs_in_eval_mode_and_the_mode_comes_back(training):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).train(training)
    with eval_mode(model) as inside:
        assert inside is model and not model.training and not model[1].training
    assert model.training is training and model[1].training is training


def test_the_mode_comes_back_when_the_block_raises():
    model = torch.nn.Dropout(0.5)
    with pytest.raises(RuntimeError, match="forward failed"), eval_mode(model):
        raise RuntimeError("forward failed")
    assert model.training


def test_no_function_toggles_eval_mode_and_back_by_hand():
    """One home for "eval mode, then restore the training flag": a function that writes it out
    again (model.eval() ... model.train(was_training)) uses llmlab.models.eval_mode instead."""
    assert mode_toggles(PACKAGE) == ["llmlab/models/eval_mode.py:eval_mode"]
