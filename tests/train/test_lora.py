"""LoRALinear against peft on the same base and seed: the same adapter, the same outputs before
and after a few optimizer steps, the same merged weights; merge and unmerge undo each other.
Mistakes caught (each shown to fail): B random and A zero (the model does not start as the
pretrained one), scaling by alpha instead of alpha / rank, a Conv1D update added untransposed,
and a base left trainable."""

import copy

import pytest
import torch
from torch import nn

from llmlab.models import build_model, preset
from llmlab.train import lora as lora_module
from llmlab.train.lora import LoRALinear, add_lora, merge_lora

peft = pytest.importorskip("peft")

VOCAB = 97
TARGETS = ["transformer.h.0.attn.c_attn", "transformer.h.0.attn.c_proj", "transformer.h.1.mlp.c_fc"]
RANK, ALPHA = 4, 8


def tiny_gpt2():
    torch.manual_seed(0)
    return build_model(preset("tiny", vocab_size=VOCAB, context=32, n_layer=2, d_model=32,
                              n_head=2))


def ours_and_peft(base, targets=TARGETS):
    ours = copy.deepcopy(base)
    torch.manual_seed(1)
    add_lora(ours, targets, RANK, ALPHA)
    torch.manual_seed(1)
    config = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=targets)
    theirs = peft.get_peft_model(copy.deepcopy(base), config)
    return ours, theirs


def train(model, batches, lr=1e-2):
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    for ids in batches:
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def batches(steps=4):
    generator = torch.Generator().manual_seed(2)
    return [torch.randint(0, VOCAB, (2, 16), generator=generator) for _ in range(steps)]


def peft_layer(theirs, name):
    return theirs.base_model.model.get_submodule(name)


def assert_like_peft(base, targets=TARGETS):
    """The whole comparison: adapters, trainable counts, outputs before/after training, merge."""
    ours, theirs = ours_and_peft(base, targets)
    ids = batches(1)[0]
    for name in targets:
        assert torch.equal(ours.get_submodule(name).lora_A.weight,
                           peft_layer(theirs, name).lora_A["default"].weight)
    trainable = [sum(p.numel() for p in m.parameters() if p.requires_grad) for m in (ours, theirs)]
    assert trainable[0] == trainable[1]
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, base(ids).logits)  # starts as the base
    train(ours, batches())
    train(theirs, batches())
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, theirs(ids).logits)
        merge_lora(ours)
        merged = theirs.merge_and_unload()
        for name in targets:
            torch.testing.assert_close(ours.get_submodule(name).base.weight,
                                       merged.get_submodule(name).weight)
        torch.testing.assert_close(ours(ids).logits, merged(ids).logits)


def test_matches_peft_on_gpt2_conv1d_layers():
    assert_like_peft(tiny_gpt2())


def test_matches_peft_on_a_bfloat16_base_with_float32_adapters():
    base = tiny_gpt2().to(torch.bfloat16)
    assert_like_peft(base)
    ours, _ = ours_and_peft(base)
    layer = ours.get_submodule(TARGETS[0])
    assert layer.lora_A.weight.dtype == torch.float32 and layer.base.weight.dtype == torch.bfloat16


class TwoLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 24)
        self.hidden = nn.Linear(24, 40)
        self.out = nn.Linear(40, VOCAB)

    def forward(self, ids, labels=None):
        logits = self.out(torch.relu(self.hidden(self.embed(ids))))
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return type("Output", (), {"logits": logits, "loss": loss})()


def test_matches_peft_on_nn_linear_layers():
    torch.manual_seed(0)
    assert_like_peft(TwoLinear(), ["hidden", "out"])


def test_merge_and_unmerge_undo_each_other():
    torch.manual_seed(0)
    layer = LoRALinear(nn.Linear(16, 8), rank=2, alpha=4)
    nn.init.normal_(layer.lora_B.weight)  # as after training
    before = layer.base.weight.clone()
    x = torch.randn(3, 16)
    with torch.no_grad():
        unmerged = layer(x)
        layer.merge()
        torch.testing.assert_close(layer(x), unmerged)
        layer.unmerge()
    torch.testing.assert_close(layer.base.weight, before)
    assert not layer.base.weight.requires_grad and layer.lora_A.weight.requires_grad
    with pytest.raises(RuntimeError, match="not merged"):
        layer.unmerge()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="rank must be a positive integer"):
        LoRALinear(nn.Linear(4, 4), rank=0)
    with pytest.raises(TypeError, match="Embedding"):
        LoRALinear(nn.Embedding(4, 4))
    with pytest.raises(ValueError, match="no modules named"):
        add_lora(TwoLinear(), ["hiden"])


# The mistakes, each patched into LoRALinear: the comparison with peft must fail on every one.
def b_random_a_zero(self, *args, **kwargs):
    original_init(self, *args, **kwargs)
    nn.init.zeros_(self.lora_A.weight)
    nn.init.kaiming_uniform_(self.lora_B.weight)


def alpha_not_over_rank(self, *args, **kwargs):
    original_init(self, *args, **kwargs)
    self.scaling = self.alpha


def base_trainable(self, *args, **kwargs):
    original_init(self, *args, **kwargs)
    self.base.requires_grad_(True)


def untransposed_delta(self):
    delta = self.lora_B.weight @ self.lora_A.weight * self.scaling
    return delta.reshape(self.base.weight.shape)  # right size, wrong layout for Conv1D


original_init = LoRALinear.__init__


@pytest.mark.parametrize(
    "attribute, mistake",
    [("__init__", b_random_a_zero), ("__init__", alpha_not_over_rank),
     ("__init__", base_trainable), ("delta_weight", untransposed_delta)],
    ids=["B random, A zero", "scaling alpha", "base trainable", "Conv1D untransposed"],
)
def test_each_mistake_fails_the_comparison(monkeypatch, attribute, mistake):
    monkeypatch.setattr(lora_module.LoRALinear, attribute, mistake)
    with pytest.raises(AssertionError):
        assert_like_peft(tiny_gpt2())
