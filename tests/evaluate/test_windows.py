"""Held-out windows: every held-out token is predicted once; bad input is refused."""

import pytest
import torch

from llmlab.evaluate import held_out_windows


def test_windows_predict_every_held_out_token_once():
    ids = torch.arange(100)
    windows = held_out_windows(ids, seq_len=32)
    assert [w.numel() for w in windows] == [33, 33, 33, 4]  # a short tail, not dropped
    targets = torch.cat([w[1:] for w in windows])
    assert torch.equal(targets, ids[1:])  # each token after the first predicted exactly once
    assert len(held_out_windows(ids, 32, max_windows=2)) == 2


@pytest.mark.parametrize("call", [lambda: held_out_windows(torch.arange(10), 0),
                                  lambda: held_out_windows([5], 4),
                                  lambda: held_out_windows(torch.arange(10), 4, max_windows=0)])
def test_windows_refuse_bad_input(call):
    with pytest.raises(ValueError):
        call()
