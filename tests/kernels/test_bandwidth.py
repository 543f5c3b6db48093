"""Counting the bytes eager softmax moves; timing the softmaxes on a GPU."""

import pytest
import torch

pytest.importorskip("triton")

from llmlab.kernels.bandwidth import eager_softmax, eager_traffic, softmax_bandwidth  # noqa: E402


def test_eager_softmax_is_softmax():
    x = torch.randn(4, 33) * 50
    torch.testing.assert_close(eager_softmax(x), torch.softmax(x, dim=-1))


def test_eager_softmax_sends_the_tensor_through_memory_eight_times():
    x = torch.randn(16, 100)
    ops = eager_traffic(eager_softmax, x)
    assert [op["op"] for op in ops] == ["amax", "sub", "exp", "sum", "div"]
    tensor, row = x.numel() * 4, 16 * 4
    assert sum(op["bytes read"] for op in ops) == 5 * tensor + 2 * row
    assert sum(op["bytes written"] for op in ops) == 3 * tensor + 2 * row


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="times CUDA kernels")
def test_softmax_bandwidth_on_a_gpu():
    table = softmax_bandwidth(rows=256, cols=1000)
    assert [row["softmax"] for row in table][-1] == "Triton (llmlab.kernels.softmax)"
    assert all(row["time (us)"] > 0 and row["GB/s"] > 0 for row in table)
