"""Emulated fp8 training: the three scaling recipes on hand-computed cases, the fp8 linear layer
against explicit casts, the swap of the blocks' matrices, and a few training steps."""

import pytest
import torch
from torch import nn
from torchao.float8.float8_utils import amax_to_scale, to_fp8_saturated
from transformers.pytorch_utils import Conv1D

from llmlab.models import block_matrices, build_model, linear_from_conv1d, preset
from llmlab.quant.fp8 import fp8_quantize
from llmlab.quant.fp8_training import (
    FP8Cast,
    FP8Linear,
    delayed_scale_cast,
    fp8_counts,
    fp8_training,
    overflow_threshold,
)

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
SHAPE = preset("tiny", vocab_size=64, context=16, n_layer=2, d_model=32, n_head=2)


def counts(cast: FP8Cast) -> tuple[int, int, int]:
    return cast.counts.underflow, cast.counts.overflow, cast.counts.inf_or_nan


def test_delayed_scale_comes_from_the_history_and_saturates_what_lies_beyond_it():
    history = torch.tensor([1.0, 4.0, 2.0])  # newest first: the largest amax is 4
    x = torch.tensor([1.0, -2.0, 8.0, 0.0])
    x_fp8, scale, new_history = delayed_scale_cast(x, history, E4M3)
    assert scale.item() == pytest.approx(4 / 448)
    assert x_fp8.dtype == E4M3
    assert x_fp8.float().tolist() == pytest.approx([112, -224, 448, 0])  # 8 -> 896: saturated
    assert new_history.tolist() == [8.0, 1.0, 4.0]  # this amax in front, the oldest dropped
    assert history.tolist() == [1.0, 4.0, 2.0]  # the caller's history left as it was


def test_delayed_scale_is_torchaos_scale_and_cast():
    # torchao keeps max / amax and multiplies by it; llmlab keeps amax / max and divides.
    generator = torch.Generator().manual_seed(0)
    history = torch.rand(8, generator=generator) * 3
    x = torch.randn(64, 64, generator=generator) * 2
    for dtype in (E4M3, E5M2):
        x_fp8, scale, _ = delayed_scale_cast(x, history, dtype)
        theirs = amax_to_scale(history.max(), dtype)
        assert scale.item() == pytest.approx(1 / theirs.item(), rel=1e-6)
        assert torch.equal(x_fp8.float(), to_fp8_saturated(x * theirs, dtype).float())


def test_overflow_starts_half_a_step_above_the_max():
    for dtype, threshold in ((E4M3, 464.0), (E5M2, 61440.0)):
        assert overflow_threshold(dtype) == threshold
        assert torch.tensor(threshold - 1).to(dtype).float() == torch.finfo(dtype).max


def test_unscaled_cast_flushes_small_values_and_overflows_large_ones():
    weight = FP8Cast("none", "weight")  # e4m3: smallest subnormal 2^-9, max 448
    back = weight(torch.tensor([1e-4, 1000.0, 1.0, 0.0]))
    assert back[[0, 2, 3]].tolist() == [0.0, 1.0, 0.0]
    # The zero is no underflow. Past e4m3fn's max (it has no infinity) torch 2.12 on saturates
    # 1000 to 448; before, the cast gives NaN, and the count says so.
    nan_before_2_12 = 0 if torch.__version__ >= "2.12" else 1
    assert counts(weight) == (1, 1, nan_before_2_12)
    grad = FP8Cast("none", "grad")  # e5m2: smallest subnormal 2^-16, max 57344, has inf
    back = grad(torch.tensor([1e-7, 1e5, -3.0]))
    assert back.tolist() == [0.0, float("inf"), -3.0]
    assert counts(grad) == (1, 1, 1) and grad.counts.values == 3


def test_dynamic_scale_puts_the_amax_on_the_max_and_loses_nothing_exact():
    cast = FP8Cast("dynamic", "input")
    x = torch.tensor([2.0, -1.0, 0.5, 0.0])  # scale 2 / 448: 448, -224, 112, 0, all exact
    assert torch.equal(cast(x), x)
    assert counts(cast) == (0, 0, 0)


def test_dynamic_scale_still_flushes_what_lies_far_below_the_amax():
    cast = FP8Cast("dynamic", "input")
    cast(torch.tensor([448.0, 1e-4]))  # scale 1: 1e-4 is below e4m3's smallest subnormal / 2
    assert counts(cast) == (1, 0, 0)


def test_delayed_recipe_starts_its_history_from_the_first_tensor_then_lags():
    cast = FP8Cast("delayed", "input", history_length=3)
    assert torch.equal(cast(torch.tensor([2.0, 1.0])), torch.tensor([2.0, 1.0]))  # dynamic start
    assert cast.history.tolist() == [2.0, 2.0, 2.0]
    back = cast(torch.tensor([4.0, 1.0]))  # scale still from 2: 4 -> 896 saturates to 448 -> 2
    assert back.tolist() == [2.0, 1.0]
    assert counts(cast) == (0, 1, 0)
    assert cast.history.tolist() == [4.0, 2.0, 2.0]


def test_an_unknown_recipe_is_refused():
    with pytest.raises(ValueError, match="unknown fp8 scaling recipe"):
        FP8Cast("static", "input")


def fake(x, name):
    """x through a per-tensor dynamic fp8 cast and back, by llmlab.quant.fp8."""
    return fp8_quantize(x, name).dequantize()


def test_fp8_linear_computes_with_explicit_casts_forward_and_backward():
    generator = torch.Generator().manual_seed(0)
    linear = nn.Linear(8, 6)
    x = torch.randn(3, 5, 8, generator=generator, requires_grad=True)
    grad_out = torch.randn(3, 5, 6, generator=generator)
    layer = FP8Linear(linear, "dynamic")
    out = layer(x)
    out.backward(grad_out)
    x8, w8 = fake(x.detach(), "e4m3"), fake(linear.weight.detach(), "e4m3")
    g8 = fake(grad_out, "e5m2")
    torch.testing.assert_close(out, x8 @ w8.T + linear.bias, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(x.grad, g8 @ w8, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(linear.weight.grad, g8.reshape(-1, 6).T @ x8.reshape(-1, 8),
                               rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(linear.bias.grad, grad_out.sum((0, 1)))  # the bias: float32
    assert layer.weight is linear.weight and layer.bias is linear.bias


def test_a_conv1d_computes_as_the_linear_it_equals():
    torch.manual_seed(0)
    conv = Conv1D(6, 8)  # weight (in 8, out 6)
    linear = linear_from_conv1d(conv)
    x = torch.randn(4, 8)
    grad_out = torch.randn(4, 6)
    outs = []
    for layer in (FP8Linear(conv, "dynamic"), FP8Linear(linear, "dynamic")):
        out = layer(x)
        out.backward(grad_out)
        outs.append(out)
    torch.testing.assert_close(outs[0], outs[1])
    torch.testing.assert_close(conv.weight.grad, linear.weight.grad.T)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_swap_takes_exactly_the_blocks_matrices(family):
    model = build_model(SHAPE.replace(family=family, tied_embeddings=family == "gpt2"))
    expected = [name.removesuffix(".weight") for name in block_matrices(model)]
    before = {name: id(p) for name, p in model.named_parameters()}
    assert fp8_training(model, "delayed") == expected
    swapped = [name for name, m in model.named_modules() if isinstance(m, FP8Linear)]
    assert swapped == expected
    assert type(model.lm_head) is nn.Linear  # the head and embeddings stay float32
    assert {name: id(p) for name, p in model.named_parameters()} == before  # same parameters
    with pytest.raises(ValueError, match="swapped already"):
        fp8_training(model)


def train(recipe: str, steps: int, loss_scale: float = 1.0):
    model = build_model(SHAPE, seed=0)
    fp8_training(model, recipe)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(steps):
        loss = model(tokens, labels=tokens).loss
        (loss * loss_scale).backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return model, losses


@pytest.mark.parametrize("recipe", ["none", "dynamic", "delayed"])
def test_a_tiny_model_trains_with_each_recipe(recipe):
    model, losses = train(recipe, steps=4)
    assert losses[-1] < losses[0]
    rows = fp8_counts(model)
    assert [(row["recipe"], row["role"]) for row in rows] == [
        (recipe, "input"), (recipe, "weight"), (recipe, "grad")]
    if recipe != "none":
        assert all(torch.isfinite(torch.tensor(losses)))
        assert all(row["inf_or_nan"] == 0 for row in rows)


@pytest.mark.parametrize("recipe, lost", [("none", 1.0), ("dynamic", 0.0), ("delayed", 0.0)])
def test_gradients_below_e5m2s_subnormals_vanish_unscaled_and_survive_scaled(recipe, lost):
    # A loss scaled by 1e-9 puts every gradient below e5m2's smallest subnormal (2^-16 ~ 1.5e-5).
    model, _ = train(recipe, steps=0)
    tokens = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    (model(tokens, labels=tokens).loss * 1e-9).backward()
    grad = next(row for row in fp8_counts(model) if row["role"] == "grad")
    layers = [m for m in model.modules() if isinstance(m, FP8Linear)]
    zero = sum(int((m.weight.grad == 0).sum()) for m in layers) / sum(m.weight.numel()
                                                                        for m in layers)
    assert zero == pytest.approx(lost, abs=0.05)  # unscaled: no block matrix learns anything
    # Unscaled, the gradients reaching each block's last matrices underflow, and the matrices
    # before them get zeros (no underflow of their own); scaled, few values are lost.
    underflow = grad["underflow"] / grad["values"]
    assert underflow > 0.1 if lost else underflow < 0.05
