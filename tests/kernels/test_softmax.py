"""The fused softmax agrees with torch.softmax, forward and backward, on random shapes, odd row
lengths, strided rows and extreme values (under Triton's interpreter on a CPU machine)."""

import pytest
import torch

pytest.importorskip("triton")

from llmlab.kernels import interpreted  # noqa: E402
from llmlab.kernels.softmax import MAX_COLS, softmax, softmax_backward, softmax_forward  # noqa: E402

DEVICE = "cpu" if interpreted() else "cuda"
SHAPES = [(1, 1), (3, 3), (5, 37), (2, 1000), (2, 3, 17), (4, 64)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_torch(shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(DEVICE) * 3
    torch.testing.assert_close(softmax_forward(x), torch.softmax(x, dim=-1))


def test_rows_with_a_stride_and_an_output_with_another():
    storage = torch.randn(6, 50, device=DEVICE)
    x = storage[:, 3:40]  # row stride 50, 37 columns
    out = torch.full((6, 64), float("nan"), device=DEVICE)[:, :37]  # row stride 64
    assert softmax_forward(x, out) is out
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))
    assert torch.isnan(out.as_strided((6, 27), (64, 1), 37)).all()  # past each row: untouched


def test_extreme_values():
    x = torch.tensor([[1e4, -1e4, 0.0, 1e4 - 1], [-1e4, -1e4 - 2, -1e4 + 3, -float("inf")],
                      [float("-inf"), 5.0, float("-inf"), 5.0]], device=DEVICE)
    got = softmax_forward(x)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, torch.softmax(x, dim=-1))


@pytest.mark.parametrize("shape", [(3, 5), (4, 37), (2, 2, 130)])
def test_gradients_match_torch(shape):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=generator).to(DEVICE)
    weights = torch.randn(shape, generator=generator).to(DEVICE)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    (softmax(ours) * weights).sum().backward()
    (torch.softmax(theirs, dim=-1) * weights).sum().backward()
    torch.testing.assert_close(ours.grad, theirs.grad)


def test_backward_takes_a_broadcast_gradient():
    y = torch.softmax(torch.randn(3, 9, device=DEVICE), dim=-1)
    dy = torch.ones(9, device=DEVICE).expand(3, 9)  # row stride 0, as from a .sum()
    # sum_i y_i = 1 whatever x is, so its gradient is zero.
    torch.testing.assert_close(softmax_backward(y, dy), torch.zeros(3, 9, device=DEVICE))


@pytest.mark.skipif(not interpreted(), reason="the interpreter's float32-only rule")
def test_the_interpreter_refuses_bf16_with_what_to_do():
    with pytest.raises(ValueError, match=r"bfloat16.*float32 only.*x\.float\(\)"):
        softmax_forward(torch.randn(2, 8, dtype=torch.bfloat16))


def test_rows_too_long_for_one_tile_are_refused():
    with pytest.raises(ValueError, match="1 to 65536"):
        softmax_forward(torch.empty(1, MAX_COLS + 1, device=DEVICE))


def test_out_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match=r"out has shape \(2, 7\).*\(2, 8\)"):
        softmax_forward(torch.randn(2, 8, device=DEVICE), torch.empty(2, 7, device=DEVICE))


@pytest.mark.skipif(torch.cuda.is_available(), reason="what happens without a GPU")
def test_without_a_gpu_the_interpreter_is_on():
    assert interpreted()


def test_random_shapes_forward_and_backward():
    generator = torch.Generator().manual_seed(7)
    for _ in range(5):
        rows, n_cols = (int(n) for n in torch.randint(1, 300, (2,), generator=generator))
        x = (torch.randn(rows % 9 + 1, n_cols, generator=generator) * 20).to(DEVICE)
        ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
        dy = torch.randn(x.shape, generator=generator).to(DEVICE)
        torch.testing.assert_close(softmax(ours), torch.softmax(theirs, dim=-1))
        softmax(ours).backward(dy)
        torch.softmax(theirs, dim=-1).backward(dy)
        torch.testing.assert_close(ours.grad, theirs.grad)
