"""Wanda (|W| * ||X||, compared within each output, int(sparsity * inputs) pruned per output as
the paper's code does) and the input norms it weighs by."""

import pytest
import torch
from helpers.pruning import GPT2, SHAPES

from llmlab.models import build_model
from llmlab.prune import (
    input_norms,
    layerwise_masks,
    masked_weights,
    prunable_weights,
    smallest_mask,
    sparsity_report,
    wanda_mask,
    wanda_prune,
)


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
                       wanda_mask(weight, norms, dim=1, sparsity=0.5).T)


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


def test_wanda_prunes_as_many_per_output_as_the_papers_code():
    """The paper's code (Sun et al., lib/prune.py): sort each output's scores, prune the first
    int(inputs * sparsity), rounded down; at 60% of 128 inputs that is 76, not round()'s 77."""
    generator = torch.Generator().manual_seed(0)
    weight, norms = torch.randn(8, 128, generator=generator), torch.rand(128, generator=generator)
    for sparsity in (0.6, 0.7, 0.5, 0.29):  # 0.29 * 100 is 28.999...: int() gives 28, too
        columns = 100 if sparsity == 0.29 else 128
        w, n = weight[:, :columns], norms[:columns]
        scores = w.abs() * n
        papers = torch.ones_like(w, dtype=torch.bool)
        papers.scatter_(1, torch.sort(scores, dim=-1, stable=True)[1][:, : int(columns * sparsity)],
                        False)
        assert torch.equal(wanda_mask(w, n, dim=1, sparsity=sparsity), papers), sparsity
    assert (~wanda_mask(weight, norms, dim=1, sparsity=0.6)).sum(1).tolist() == [76] * 8


def test_wanda_refuses_non_finite_numbers_and_ids_beyond_the_vocabulary():
    half = GPT2.vocab_size // 2  # batch 1's ids are not in batch 0
    batches = [torch.randint(0, half, (2, 16)), torch.randint(half, 2 * half, (2, 16))]
    model = build_model(GPT2)
    with torch.no_grad():
        model.transformer.h[1].attn.c_proj.weight[0, 2] = torch.nan
    with pytest.raises(ValueError, match=r"transformer.h.1.attn.c_proj.weight holds 1 NaN or inf"):
        wanda_prune(model, 0.5, batches)
    assert not masked_weights(model)  # refused before any block was pruned
    model = build_model(GPT2)
    with torch.no_grad():  # finite, but its LayerNorm overflows: block 0 reads NaN
        model.transformer.wte.weight[batches[1][0, 3]] = 3e38
    with pytest.raises(ValueError, match="the input of transformer.h.0.attn.c_attn.weight on "
                       "calibration batch 1 holds"):
        wanda_prune(model, 0.5, batches)
    model = build_model(GPT2)
    with pytest.raises(ValueError, match=r"calibration batch 1 holds token id 256, outside this "
                       r"model's vocabulary of 256 \(ids 0 to 255\)"):
        wanda_prune(model, 0.5, [batches[0], torch.full((2, 16), GPT2.vocab_size)])
    weight = torch.randn(4, 8)
    with pytest.raises(ValueError, match="the input norms holds 1 NaN"):
        wanda_mask(weight, torch.tensor([1.0] * 7 + [torch.nan]), dim=1, sparsity=0.5)
    weight[2, 2] = -torch.inf
    with pytest.raises(ValueError, match=r"the weight holds 1 NaN or inf value\(s\), the first at "
                       r"index \(2, 2\) \(-inf\)"):
        wanda_mask(weight, torch.ones(8), dim=1, sparsity=0.5)


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
