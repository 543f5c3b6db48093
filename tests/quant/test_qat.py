"""Quantization-aware training on tiny GPT-2 and Llama models: the forward computes with exactly
the fake-quantized weights, the gradient passes straight through to the float weights, finish_qat
leaves every weight on its int grid, bad input is refused, and torchao's int4 QAT agrees where
the conventions meet (it differs only by its grid's offset and its gradient at each group's
ends)."""

import copy
import importlib.util

import pytest
import torch
from helpers.qat import GROUP, SEQ, SHAPE, SHAPES, VOCAB
from torch import nn
from torch.nn.utils import parametrize

from llmlab.evaluate import size_on_disk
from llmlab.models import build_model
from llmlab.prune import apply_masks, global_masks
from llmlab.quant import (
    fake_quant_variant,
    fake_quantize,
    finish_qat,
    prepare_qat,
    qat_layers,
    quantize,
)
from llmlab.quant.model import matrix, write_back
from llmlab.quant.qat import FakeQuantized, StraightThrough


def tokens(seed=0, batch=2, seq=SEQ):
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", SHAPES)
def test_forward_computes_with_exactly_the_fake_quantized_weights(family):
    model = build_model(SHAPES[family]).eval()
    reference = copy.deepcopy(model)
    names = prepare_qat(model, bits=4, group_size=GROUP)
    assert len(names) == 2 * (4 if family == "gpt2" else 7)
    with torch.no_grad():
        for name in names:  # the reference model gets the fake-quantized weights as plain ones
            layer = reference.get_submodule(name)
            write_back(layer, quantize(matrix(layer), 4, symmetric=False, granularity=GROUP))
            assert torch.equal(model.get_submodule(name).weight, layer.weight)
        ids = tokens()
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=1e-6)


def test_gradient_passes_straight_through_to_the_float_weights():
    """The STE's gradient on the float weight equals the float gradient of the same loss taken
    at the fake-quantized weight: rounding is treated as the identity going back."""
    torch.manual_seed(0)
    weight = torch.randn(8, 64, requires_grad=True)
    x, target = torch.randn(5, 64), torch.randn(5, 8)
    loss = nn.functional.mse_loss(x @ StraightThrough.apply(weight, 4, GROUP).T, target)
    loss.backward()
    frozen = fake_quantize(weight.detach(), 4, granularity=GROUP).requires_grad_()
    nn.functional.mse_loss(x @ frozen.T, target).backward()
    torch.testing.assert_close(weight.grad, frozen.grad, rtol=0, atol=0)
    # Not the gradient at the float weight: the forward really used the rounded one.
    at_float = weight.detach().clone().requires_grad_()
    nn.functional.mse_loss(x @ at_float.T, target).backward()
    assert not torch.allclose(at_float.grad, weight.grad)


@pytest.mark.parametrize("family", SHAPES)
def test_training_moves_the_float_weights_and_finish_puts_them_on_the_grid(family):
    model = build_model(SHAPES[family])
    names = prepare_qat(model, bits=4, group_size=GROUP)
    floats = {n: model.get_submodule(n).parametrizations.weight.original.detach().clone()
              for n in names}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        ids = tokens(step)
        model(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert all(not torch.equal(floats[n], model.get_submodule(n).parametrizations.weight.original)
               for n in names)
    model.eval()
    with torch.no_grad():
        before = model(tokens()).logits
    report = finish_qat(model)
    assert qat_layers(model) == {} and set(report.layers) == set(names)
    assert not any(".parametrizations." in n for n, _ in model.named_parameters())
    for name, q in report.layers.items():
        weight = matrix(model.get_submodule(name))
        assert torch.equal(weight, q.dequantize())  # exactly on the grid
        assert q.codes.min() >= 0 and q.codes.max() <= 15 and q.group_size == GROUP
        assert torch.equal(quantize(weight, 4, False, GROUP).codes, q.codes)  # stays there
    assert report.layer_bits_per_weight == pytest.approx(4 + (16 + 4) / GROUP)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens()).logits, before, rtol=0, atol=1e-5)


def test_bad_input_is_refused():
    model = build_model(SHAPE)
    with pytest.raises(ValueError, match="bits must be from 2 to 8"):
        prepare_qat(model, bits=16)
    with pytest.raises(ValueError, match="group size 48 does not divide transformer.h.0"):
        prepare_qat(model, group_size=48)
    with pytest.raises(TypeError, match="group_size must be a positive integer"):
        prepare_qat(model, group_size=32.0)
    assert qat_layers(model) == {}  # a refused call changes nothing
    with pytest.raises(ValueError, match="call prepare_qat first"):
        finish_qat(model)
    prepare_qat(model, group_size=GROUP)
    with pytest.raises(ValueError, match="call finish_qat first"):
        prepare_qat(model, group_size=GROUP)
    pruned = build_model(SHAPE)
    apply_masks(pruned, global_masks(pruned, 0.5))
    with pytest.raises(ValueError, match="pruning mask"):
        prepare_qat(pruned, group_size=GROUP)


# ------------------------------------------------------------- torchao's QAT on nn.Linear

needs_torchao = pytest.mark.skipif(
    importlib.util.find_spec("torchao") is None, reason="torchao is not installed"
)


def torchao_fake_quantized(linear: nn.Linear, group_size: int) -> nn.Linear:
    """torchao's int4 weight-only QAT (QATConfig around Int4WeightOnlyConfig) on a copy."""
    from torchao.quantization import Int4WeightOnlyConfig, quantize_
    from torchao.quantization.qat import FakeQuantizedLinear, QATConfig

    wrapper = nn.Sequential(copy.deepcopy(linear))  # quantize_ swaps children, not the root
    quantize_(wrapper, QATConfig(Int4WeightOnlyConfig(group_size=group_size)))
    assert isinstance(wrapper[0], FakeQuantizedLinear)
    return wrapper[0]


def grid_aligned_weight(rows=16, cols=128, seed=0):
    """Weights whose every group holds its own grid's ends, (0 - z) s and (15 - z) s, for an
    integer z: there the two 4-bit conventions below pick the same grid."""
    generator = torch.Generator().manual_seed(seed)
    groups = cols // GROUP
    scale = torch.rand(rows, groups, 1, generator=generator) * 0.02 + 0.005
    zero = torch.randint(1, 15, (rows, groups, 1), generator=generator).float()
    codes = torch.rand(rows, groups, GROUP, generator=generator) * 14.8 + 0.1  # off the ties
    codes[..., 0], codes[..., 1] = 0, 15
    return ((codes - zero) * scale).view(rows, cols)


@needs_torchao
def test_torchao_int4_qat_matches_on_shared_grids_and_differs_only_by_the_offset():
    """torchao 0.18 fake-quantizes int4 with the tinygemm grid: scale (max - min) / 15 and a
    float offset, min itself (w ~ min + q s). llmlab's grid (GPTQ's) widens the range to hold 0
    and rounds the offset to an integer zero point, so 0 is exactly representable. Same scale
    whenever a group holds both signs; the grids coincide when -min / s is an integer."""
    torch.manual_seed(0)
    linear = nn.Linear(128, 16)
    with torch.no_grad():
        linear.weight.copy_(grid_aligned_weight())
    theirs, x = torchao_fake_quantized(linear, GROUP), torch.randn(4, 128)
    ours = copy.deepcopy(linear)  # the hand STE's parametrization, as prepare_qat registers it
    parametrize.register_parametrization(ours, "weight", FakeQuantized(4, GROUP, transposed=False))
    torch.testing.assert_close(theirs(x), ours(x), rtol=0, atol=1e-5)
    # Gradients: both pass straight through the rounding, but torchao's scale and offset are
    # computed from the weights with autograd on, so each group's min and max entries also get
    # a gradient through them; llmlab's grid is a constant, as in the GPTQ-style STE.
    theirs(x).square().sum().backward()
    ours(x).square().sum().backward()
    gap = (theirs.weight.grad - ours.parametrizations.weight.original.grad).view(16, -1, GROUP)
    grouped = linear.weight.detach().view(16, -1, GROUP)
    ends = (grouped == grouped.amax(-1, keepdim=True)) | (grouped == grouped.amin(-1, keepdim=True))
    assert gap[~ends].abs().max() < 1e-4 and gap[ends].abs().max() > 0.1
    # Random weights: the two roundings land at most one step s apart, and do differ.
    with torch.no_grad():
        linear.weight.copy_(torch.randn(16, 128) * 0.05)
    theirs = torchao_fake_quantized(linear, GROUP)
    weight = linear.weight.detach()
    grouped = weight.view(16, -1, GROUP)
    step = ((grouped.amax(-1) - grouped.amin(-1)) / 15)[..., None]
    gap = (theirs.weight_fake_quantizer(weight) - fake_quantize(weight, 4, False, GROUP)).abs()
    assert (gap.view(16, -1, GROUP) <= step * 1.001).all() and gap.max() > 0.1 * step.max()


@needs_torchao
def test_torchao_qat_leaves_gpt2_conv1d_in_float():
    """Why the hand STE covers Conv1D itself: torchao's QAT swaps nn.Linear modules only, so on
    GPT-2 it fake-quantizes the LM head and none of the blocks' Conv1D projections."""
    from torchao.quantization import Int4WeightOnlyConfig, quantize_
    from torchao.quantization.qat import FakeQuantizedLinear, QATConfig

    model = build_model(SHAPE)
    quantize_(model, QATConfig(Int4WeightOnlyConfig(group_size=GROUP)))
    swapped = [n for n, m in model.named_modules() if isinstance(m, FakeQuantizedLinear)]
    assert swapped == ["lm_head"]
    assert len(prepare_qat(build_model(SHAPE), group_size=GROUP)) == 8  # every Conv1D of 2 blocks


def test_a_finished_qat_model_goes_into_the_quant_table():
    """finish_qat's report is quantize_model's kind: the packed file and the bits it counts."""
    model = build_model(SHAPE)
    prepare_qat(model, group_size=GROUP)
    variant = fake_quant_variant("qat-4", model, finish_qat(model))
    assert variant.bits_per_weight == pytest.approx(4 + (16 + 4) / GROUP)
    assert 0 < variant.size_bytes < size_on_disk(model) / 2  # fp32 weights vs packed 4-bit
