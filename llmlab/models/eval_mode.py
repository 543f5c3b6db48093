"""Run a model in eval mode for a while, then give it back its training flag: the one place that
switches a model's mode and restores it (tests/models/test_eval_mode.py keeps it so)."""

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """`with eval_mode(model):` turns dropout off for the block (the same model gives the same
    numbers every time) and puts back the mode the model had, even when the block raises: a
    training loop that scores or samples mid-run keeps training with dropout on."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
