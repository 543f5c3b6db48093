"""MLP-neuron removal on tiny random GPT-2 and Llama models: the smaller model equals the masked
one and reloads with from_pretrained; stale, out-of-range or repeated indices are refused."""

import copy
import math

import pytest
import torch
from helpers.pruning import GPT2, SHAPES
from transformers import AutoModelForCausalLM

from llmlab.models import build_model
from llmlab.prune import (
    apply_masks,
    kept_neurons,
    neuron_masks,
    neuron_scores,
    remove_mlp_neurons,
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
                                                     else 3 * GPT2.d_model)
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


def test_kept_neurons_refuses_non_finite_scores_by_block():
    model = build_model(GPT2)
    scores = neuron_scores(model)
    scores[1][7] = math.nan  # topk would rank it above every neuron and keep it
    with pytest.raises(ValueError, match=r"the neuron-score tensor of block 1 holds 1 NaN or inf "
                       r"value\(s\), the first at index \(7,\)"):
        kept_neurons(model, 0.5, scores)
    with torch.no_grad():
        model.transformer.h[0].mlp.c_proj.weight[4, 0] = math.inf  # the default scores follow it
    with pytest.raises(ValueError, match="the neuron-score tensor of block 0 holds 1 NaN or inf"):
        kept_neurons(model, 0.5)


def test_neuron_removal_refuses_indices_the_model_does_not_have():
    model = build_model(GPT2)
    kept = kept_neurons(model, 0.5)
    assert kept[0].max() >= 128  # so the stale indices below reach past the new width
    remove_mlp_neurons(model, kept)
    before = copy.deepcopy(model.state_dict())
    stale = r"block 0: kept neuron \d+ does not exist, the MLP has 128 neurons .*removing twice"
    with pytest.raises(ValueError, match=stale + r".*kept_neurons\(model, sparsity\)"):
        remove_mlp_neurons(model, kept)  # the same indices again, on the model they shrank
    with pytest.raises(ValueError, match="block 0: kept neuron -1 does not exist"):
        remove_mlp_neurons(model, [torch.tensor([-1, 2]), torch.tensor([0, 1])])
    with pytest.raises(ValueError, match="block 1: a kept neuron index appears twice"):
        remove_mlp_neurons(model, [torch.tensor([0, 1]), torch.tensor([3, 3])])
    after = model.state_dict()  # every refusal left the model as it was
    assert all(torch.equal(after[name], value) for name, value in before.items())
    assert model.config.n_inner == 128
