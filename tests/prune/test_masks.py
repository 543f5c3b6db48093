"""Masks on tiny random GPT-2 and Llama models: identical to torch.nn.utils.prune (ties and
tensors of different sizes included), N:M masks, and the errors for bad input (NaN weights
included)."""

import math

import pytest
import torch
from helpers.pruning import GPT2, SHAPES, same_masks
from torch.nn.utils import prune as torch_prune

from llmlab.models import build_model
from llmlab.prune import (
    check_sparsity,
    global_masks,
    layerwise_masks,
    mask_sparsity,
    nm_mask,
    nm_masks,
    prunable_weights,
)


def with_ties(model):
    """Round every weight to a coarse grid: thousands of equal magnitudes at any threshold."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.round(parameter * 20) / 20)
    return model


def library_masks(model, sparsity):
    """torch.nn.utils.prune's global L1 pruning of the same matrices, in the same order."""
    modules = prunable_weights(model)
    torch_prune.global_unstructured([(m, "weight") for m in modules.values()],
                                    torch_prune.L1Unstructured, amount=sparsity)
    return {name: module.weight_mask.bool() for name, module in modules.items()}


def threshold_masks(model, sparsity):
    """A plausible mistake: keep |w| above the k-th smallest, which drops every tie at it."""
    weights = {n: m.weight.detach() for n, m in prunable_weights(model).items()}
    flat = torch.cat([w.abs().flatten() for w in weights.values()])
    threshold = torch.kthvalue(flat, round(sparsity * flat.numel())).values
    return {name: w.abs() > threshold for name, w in weights.items()}


@pytest.mark.parametrize("family", SHAPES)
@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.5, 0.9])
def test_global_masks_equal_torch_global_unstructured(family, sparsity):
    for seed in range(2):
        model = with_ties(build_model(SHAPES[family], seed=seed))
        sizes = {module.weight.numel() for module in prunable_weights(model).values()}
        assert len(sizes) > 1  # tensors of different sizes share one ranking
        ours = global_masks(model, sparsity)
        assert same_masks(ours, library_masks(model, sparsity))
        assert mask_sparsity(ours) == pytest.approx(sparsity, abs=1e-4)


def test_the_mask_comparison_catches_a_plain_threshold():
    model = with_ties(build_model(GPT2))
    assert not same_masks(threshold_masks(model, 0.5), library_masks(model, 0.5))


@pytest.mark.parametrize("family", SHAPES)
def test_layerwise_masks_equal_torch_l1_unstructured(family):
    model = with_ties(build_model(SHAPES[family]))
    ours = layerwise_masks(model, 0.6)
    for name, module in prunable_weights(model).items():
        torch_prune.l1_unstructured(module, "weight", amount=0.6)
        assert torch.equal(ours[name], module.weight_mask.bool()), name
        assert 1 - ours[name].float().mean().item() == pytest.approx(0.6, abs=1e-3)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, math.nan])
def test_sparsity_outside_zero_to_one_is_refused(bad):
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        check_sparsity(bad)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        global_masks(build_model(GPT2), bad)


@pytest.mark.parametrize("bad", ["0.5", True, None])
def test_sparsity_must_be_a_number(bad):
    with pytest.raises(TypeError):
        check_sparsity(bad)


def test_nm_mask_keeps_the_n_largest_of_every_m_along_the_input():
    torch.manual_seed(0)
    weight = torch.randn(6, 8)
    mask = nm_mask(weight, 2, 4)
    assert torch.equal(mask.view(6, 2, 4).sum(-1), torch.full((6, 2), 2))
    kept = weight.abs()[mask].view(6, 2, 2).min(-1).values
    dropped = weight.abs()[~mask].view(6, 2, 2).max(-1).values
    assert (kept >= dropped).all()  # the two kept are the group's two largest


@pytest.mark.parametrize("family", SHAPES)
def test_nm_masks_group_along_each_layers_input_features(family):
    model = build_model(SHAPES[family])
    masks = nm_masks(model, 2, 4)
    assert mask_sparsity(masks) == 0.5
    for mask in masks.values():
        # GPT-2's Conv1D holds (in, out); Llama's Linear (out, in): groups run along "in".
        groups = mask.T if family == "gpt2" else mask
        assert torch.equal(groups.reshape(-1, 4).sum(-1), torch.full((mask.numel() // 4,), 2))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nm_masks_refuse_a_non_finite_weight_by_name(bad):
    # topk ranks NaN above every number, so a NaN weight would be kept in its group of 4
    weight = torch.randn(4, 8)
    weight[2, 6] = bad
    with pytest.raises(ValueError, match=r"the weight holds 1 NaN or inf value\(s\), the first "
                       r"at index \(2, 6\)"):
        nm_mask(weight)
    model = build_model(GPT2)
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[3, 5] = bad
    with pytest.raises(ValueError, match=r"transformer.h.1.mlp.c_fc.weight: the weight holds 1 "
                       r"NaN or inf value\(s\), the first at index \(3, 5\)"):
        nm_masks(model)


def test_nm_refuses_a_dimension_not_divisible_by_m_and_bad_n():
    with pytest.raises(ValueError, match="6 is not divisible by 4"):
        nm_mask(torch.randn(4, 6), 2, 4)
    with pytest.raises(ValueError, match="0 < n < m"):
        nm_mask(torch.randn(4, 8), 4, 4)
    odd = build_model(GPT2.replace(d_ff=66))  # the MLP's hidden width is not a multiple of 4
    with pytest.raises(ValueError, match="mlp.c_proj.weight: .*66 is not divisible by 4"):
        nm_masks(odd)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_magnitude_masks_refuse_a_non_finite_weight_by_name(bad):
    model = build_model(GPT2)
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[3, 5] = bad
    for masks in (layerwise_masks, global_masks):
        with pytest.raises(ValueError, match=r"transformer.h.1.mlp.c_fc.weight holds 1 NaN or "
                           r"inf value\(s\), the first at index \(3, 5\)"):
            masks(model, 0.5)
