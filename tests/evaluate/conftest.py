"""Held-out windows that several evaluation test files score."""

import pytest
import torch
from helpers.evaluation import TINY

from llmlab.evaluate import held_out_windows


@pytest.fixture(scope="module")
def uneven_windows():
    torch.manual_seed(0)
    return held_out_windows(torch.randint(0, TINY.vocab_size, (200,)), seq_len=48)  # 48x4 + 7
