"""Round-to-nearest with groups: a hand example, exact scales, zeros and codes."""

import torch

from llmlab.quant import rtn


def test_rtn_hand_example():
    # one row, two groups of 4: [0, 0.3] spans 15 steps of 0.02; [-1, 2] has its zero at code 5
    weight = torch.tensor([[0.0, 0.1, 0.2, 0.3, -1.0, 0.0, 1.0, 2.0]])
    q = rtn(weight, bits=4, group_size=4)
    assert torch.allclose(q.scales, torch.tensor([[0.02, 0.2]]))
    assert torch.equal(q.zeros, torch.tensor([[0.0, 5.0]]))
    assert q.codes.tolist() == [[0, 5, 10, 15, 0, 5, 10, 15]]
    assert torch.allclose(q.dequantize(), weight)
