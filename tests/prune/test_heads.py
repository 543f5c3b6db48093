"""Attention-head removal: the smaller model equals the head-masked one, a Llama one reloads
with from_pretrained (GQA: whole key/value groups), a GPT-2 one does not; bad requests refused."""

import copy
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from llmlab.models import build_model, preset
from llmlab.prune import (
    apply_masks,
    attention_heads,
    head_masks,
    head_scores,
    kept_heads,
    remove_heads,
)

GPT2 = preset("tiny", vocab_size=256, context=32, n_layer=2, d_model=64, n_head=4)
LLAMA = GPT2.replace(family="llama", d_ff=96, tied_embeddings=False)  # 4 heads, 4 KV heads
GQA = LLAMA.replace(n_kv_head=2)  # 2 query heads per key/value head
SHAPES = {"gpt2": GPT2, "llama": LLAMA, "llama-gqa": GQA}


def logits(model, ids):
    with torch.no_grad():
        return model.eval()(ids).logits


def parameters(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family", SHAPES)
def test_removing_heads_gives_the_head_masked_models_output(family):
    shape = SHAPES[family]
    model = build_model(shape)
    kept = kept_heads(model, 2)
    masked = apply_masks(copy.deepcopy(model), head_masks(model, kept))
    smaller = remove_heads(copy.deepcopy(model), kept)
    ids = torch.randint(0, shape.vocab_size, (2, 12))
    torch.testing.assert_close(logits(smaller, ids), logits(masked, ids))
    assert not torch.allclose(logits(smaller, ids), logits(model, ids), atol=1e-3)
    d, d_head, removed_q = shape.d_model, shape.head_dim, 2
    removed_kv = removed_q // (shape.n_head // shape.kv_heads)
    # per layer: q rows and o columns of removed heads, k and v rows of removed KV heads
    per_layer = 2 * removed_q * d_head * d + 2 * removed_kv * d_head * d
    if family == "gpt2":
        per_layer += (removed_q + 2 * removed_kv) * d_head  # c_attn's bias
    assert parameters(smaller) == parameters(model) - shape.n_layer * per_layer


@pytest.mark.parametrize("family", ["llama", "llama-gqa"])
def test_a_llama_without_heads_reloads_with_from_pretrained(tmp_path, family):
    shape = SHAPES[family]
    model = build_model(shape)
    smaller = remove_heads(model, kept_heads(model, 2))
    assert (smaller.config.num_attention_heads, smaller.config.head_dim) == (2, shape.head_dim)
    assert smaller.config.num_key_value_heads == 2 * shape.kv_heads // shape.n_head
    smaller.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.randint(0, shape.vocab_size, (2, 12))
    torch.testing.assert_close(logits(reloaded, ids), logits(smaller, ids))


def test_a_gpt2_without_heads_runs_but_gpt2config_cannot_describe_it(tmp_path):
    model = build_model(GPT2)
    smaller = remove_heads(model, kept_heads(model, 2))
    assert smaller.transformer.h[0].attn.c_attn.weight.shape == (64, 3 * 2 * 16)
    smaller.save_pretrained(tmp_path)
    with pytest.raises(RuntimeError, match="mismatch"):  # refused, never silently re-initialised
        AutoModelForCausalLM.from_pretrained(tmp_path)


def test_the_kept_heads_score_highest_and_gqa_keeps_whole_groups():
    model = build_model(GQA)
    layout = attention_heads(model)
    assert (layout.n_head, layout.n_kv, layout.group) == (4, 2, 2)
    for scores, keep in zip(head_scores(model), kept_heads(model, 2), strict=True):
        assert keep[0] % 2 == 0 and keep[1] == keep[0] + 1  # one whole group
        dropped = torch.ones(4, dtype=torch.bool)
        dropped[keep] = False
        assert scores[keep].min() >= scores[dropped].max()
    model = build_model(GPT2)
    v_proj = model.transformer.h[0].attn.c_attn.weight[:, 128:].detach()
    o_proj = model.transformer.h[0].attn.c_proj.weight.detach()
    expected = torch.stack([v_proj[:, 16 * h : 16 * (h + 1)].norm() * o_proj[16 * h : 16 * (h + 1)]
                            .norm() for h in range(4)])
    torch.testing.assert_close(head_scores(model)[0], expected)


def test_kept_heads_refuses_non_finite_scores_by_block():
    model = build_model(GQA)
    scores = head_scores(model)
    scores[1][2] = math.nan  # topk would rank its group above every other and keep it
    with pytest.raises(ValueError, match=r"the head-score tensor of block 1 holds 1 NaN or inf "
                       r"value\(s\), the first at index \(2,\)"):
        kept_heads(model, 2, scores)
    with torch.no_grad():
        model.model.layers[0].self_attn.o_proj.weight[0, 3] = math.nan
    with pytest.raises(ValueError, match="the head-score tensor of block 0 holds 2 NaN or inf"):
        kept_heads(model, 2)  # the default scores follow the weight (both heads of its group)


def test_head_removal_refuses_what_the_model_cannot_hold():
    model = build_model(GQA)
    with pytest.raises(ValueError, match="remove every attention head"):
        kept_heads(model, 0)
    with pytest.raises(ValueError, match="multiple of 2"):
        kept_heads(model, 3)
    with pytest.raises(ValueError, match="split a key/value group"):
        remove_heads(model, [torch.tensor([0, 2])] * 2)
    with pytest.raises(ValueError, match="no head kept"):
        remove_heads(model, [torch.tensor([], dtype=torch.long)] * 2)
    with pytest.raises(ValueError, match="one head count"):
        remove_heads(model, [torch.tensor([0, 1]), torch.tensor([0, 1, 2, 3])])
    with pytest.raises(ValueError, match="keep one of \\[1, 2, 4\\]"):
        remove_heads(build_model(LLAMA), [torch.tensor([0, 1, 2])] * 2)  # 64 % 3 != 0
