"""MLP-neuron removal (the smaller model equals the masked one and reloads with from_pretrained)
and Wanda (|W| * ||X||, compared within each output) on tiny random GPT-2 and Llama models."""

import copy

import pytest
import torch
from test_prune import GPT2, SHAPES
from transformers import AutoModelForCausalLM

from llmlab.models import build_model
from llmlab.prune import (
    apply_masks,
    input_norms,
    kept_neurons,
    layerwise_masks,
    neuron_masks,
    neuron_scores,
    prunable_weights,
    remove_mlp_neurons,
    smallest_mask,
    sparsity_report,
    wanda_mask,
    wanda_prune,
)


def logits(model, ids):
    with torch.no_grad():
        return model.eval()(ids).logits


@pytest.mark.parametrize("family", SHAPES)
def test_removing_neurons_gives_the_masked_models_output_and_reloads(tmp_path, family):
    model = build_model(SHAPES[family])
    kept = kept_neurons(model, 0.5)
    width = SHAPES[family].ff
    assert [k.numel() for k in kept] == [width // 2] * GPT2.n_layer
    masked = apply_masks(copy.deepcopy(model), neuron_masks(model, kept))
    smaller = remove_mlp_neurons(copy.deepcopy(model), kept)
    ids = torch.randint(0, GPT2.vocab_size, (2, 12))
    torch.testing.assert_close(logits(smaller, ids), logits(masked, ids))
    # ...and differs from the dense model, so the comparison above is not vacuous.
    assert not torch.allclose(logits(smaller, ids), logits(model, ids), atol=1e-3)
    removed = GPT2.n_layer * (width - width // 2) * (2 * GPT2.d_model if family == "gpt2"
                                                     else 3 * GPT2.d_model)  # fmt: skip
    if family == "gpt2":
        removed += GPT2.n_layer * (width - width // 2)  # c_fc's bias of each removed neuron
    dense = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for p in smaller.parameters()) == dense - removed
    smaller.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    torch.testing.assert_close(logits(reloaded, ids), logits(smaller, ids))


def test_the_kept_neurons_are_the_highest_scoring_and_the_slices_follow_them():
    model = build_model(GPT2)
    scores = neuron_scores(model)
    kept = kept_neurons(model, 0.75)
    for layer_scores, keep in zip(scores, kept, strict=True):
        dropped = torch.ones_like(layer_scores, dtype=torch.bool)
        dropped[keep] = False
        assert layer_scores[keep].min() >= layer_scores[dropped].max()
    fc = model.transformer.h[0].mlp.c_fc.weight.detach().clone()
    remove_mlp_neurons(model, kept)
    assert torch.equal(model.transformer.h[0].mlp.c_fc.weight, fc[:, kept[0]])


def test_neuron_removal_refuses_removing_every_neuron_or_uneven_widths():
    model = build_model(GPT2)
    with pytest.raises(ValueError, match="remove every one of the 256 MLP neurons"):
        kept_neurons(model, 0.999)
    kept = kept_neurons(model, 0.5)
    with pytest.raises(ValueError, match="one MLP width"):
        remove_mlp_neurons(model, [kept[0], kept[1][:-1]])


def test_wanda_mask_weighs_magnitude_by_the_input_norm():
    torch.manual_seed(0)
    weight = torch.randn(6, 8)  # a Linear: (outputs, inputs)
    same = wanda_mask(weight, torch.ones(8), dim=1, sparsity=0.5)
    # With equal input norms it is magnitude pruning within each output row.
    rowwise = torch.stack([smallest_mask(row.abs(), 0.5) for row in weight])
    assert torch.equal(same, rowwise)
    assert torch.equal((~same).sum(1), torch.full((6,), 4))  # each output loses half
    # A feature with huge activations keeps all its weights, however small they are.
    weight[:, 3] = 1e-3
    norms = torch.ones(8)
    norms[3] = 1e6
    assert wanda_mask(weight, norms, dim=1, sparsity=0.5)[:, 3].all()
    assert not wanda_mask(weight, torch.ones(8), dim=1, sparsity=0.5)[:, 3].any()
    # GPT-2's Conv1D holds (inputs, outputs): the same weights transposed, the same mask.
    assert torch.equal(wanda_mask(weight.T, norms, dim=0, sparsity=0.5),
                       wanda_mask(weight, norms, dim=1, sparsity=0.5).T)  # fmt: skip


def test_input_norms_are_the_norms_of_what_each_layer_reads():
    model = build_model(GPT2).eval()
    ids = torch.randint(0, GPT2.vocab_size, (3, 10))
    modules = prunable_weights(model)
    norms = input_norms(model, modules, [ids[:2], ids[2:]])
    with torch.no_grad():
        embedded = model(ids, output_hidden_states=True).hidden_states[0]
        first = model.transformer.h[0].ln_1(embedded)  # what block 0's q/k/v projection reads
    expected = first.reshape(-1, GPT2.d_model).norm(dim=0)
    torch.testing.assert_close(norms["transformer.h.0.attn.c_attn.weight"], expected)


@pytest.mark.parametrize("family", SHAPES)
def test_wanda_prunes_every_output_to_the_sparsity(family):
    model = build_model(SHAPES[family])
    batches = [torch.randint(0, GPT2.vocab_size, (2, 16)) for _ in range(2)]
    masks = wanda_prune(model, 0.5, batches)
    assert sparsity_report(model)[-1].sparsity == pytest.approx(0.5)
    magnitude = layerwise_masks(build_model(SHAPES[family]), 0.5)
    assert any(not torch.equal(masks[n], magnitude[n]) for n in masks)  # not magnitude pruning
    with pytest.raises(ValueError, match="calibration"):
        wanda_prune(model, 0.5, [])
