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


def test_softmax_bandwidth_counts_one_read_and_one_write_against_the_datasheet(monkeypatch):
    # A fake clock (every softmax takes 10 us) and a card the table knows: the arithmetic alone.
    monkeypatch.setattr("triton.testing.do_bench", lambda fn: 0.01)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda device: "NVIDIA H100 80GB HBM3")
    table = softmax_bandwidth(rows=1000, cols=500, dtype=torch.float32, device="cpu")
    assert len(table) == 4
    # 1000 x 500 float32 read once and written once: 4 MB in 10 us is 400 GB/s, of 3350 GB/s.
    assert {(row["time (us)"], row["GB/s"], row["of datasheet"]) for row in table} == {
        (10.0, 400, "12% of 3350 GB/s")
    }
