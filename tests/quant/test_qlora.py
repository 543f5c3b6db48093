"""QLoRA: a frozen NF4 base (bitsandbytes) with LoRA adapters (peft), trained through
llmlab.train; bad ranks and models without quantizable layers refused."""

import sys

import pytest
import torch
from helpers.train_fakes import FixedRows, tiny_gpt2, token_stream
from torch import nn
from transformers.pytorch_utils import Conv1D

from llmlab.quant import (
    QLORA_BLOCKSIZE,
    nf4_codes,
    nf4_layers,
    qlora_model,
)
from llmlab.train import TrainConfig, Trainer

pytest.importorskip("bitsandbytes")


pytest.importorskip("peft")


def test_block_weights_become_frozen_nf4_and_only_adapters_train():
    original = tiny_gpt2(width=64)
    model = qlora_model(original, rank=4)
    layers = nf4_layers(model)
    assert len(layers) == 2 * 4  # c_attn, attn.c_proj, c_fc, mlp.c_proj in each of 2 blocks
    for layer in layers.values():
        state = layer.weight.quant_state
        assert state.quant_type == "nf4" and state.blocksize == QLORA_BLOCKSIZE
        assert state.nested  # double quantization: the scales are 8-bit too
        assert layer.weight.dtype == torch.uint8 and not layer.weight.requires_grad
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    assert len(trainable) == 2 * len(layers)
    # The model passed in is untouched, and each 4-bit layer holds its weight as (out, in):
    # NF4 in blocks of 64 is within about 10 % of it (a GPT-2 Conv1D weight taken as it is
    # stored, (in, out), would be nowhere near, even where it is square).
    from bitsandbytes.functional import dequantize_4bit

    assert isinstance(original.transformer.h[0].attn.c_proj, Conv1D)
    for name, layer in layers.items():
        conv = original.get_submodule(name.removeprefix("base_model.model.").removesuffix(
            ".base_layer"))
        weight = dequantize_4bit(layer.weight.data, layer.weight.quant_state)
        error = (weight - conv.weight.t()).norm() / conv.weight.norm()
        assert 0 < error < 0.15, name


def test_fine_tuning_through_the_trainer_changes_only_the_adapters():
    model = qlora_model(tiny_gpt2(width=64), rank=8, alpha=16)
    codes = nf4_codes(model)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    adapters = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    rows = token_stream(8 * 17).view(8, 17)  # one fixed batch: its loss can only go down
    config = TrainConfig(max_steps=60, micro_batch_size=8, seq_len=16, lr=5e-3, warmup_steps=0,
                         dtype="fp32", device="cpu", progress=False, eval_interval=20,
                         eval_batches=1, log_interval=1)
    # Validation runs the layers in eval mode without gradients, which is where bitsandbytes
    # would repack the weights on some CPUs: the codes must survive it too.
    result = Trainer(model, config, FixedRows(rows, 8), FixedRows(rows, 8)).fit()
    losses = [m.loss for m in result.history]
    assert losses[-1] < losses[0] - 0.5  # from ln(128) = 4.85 to about 3.9
    after = nf4_codes(model)
    assert after.keys() == codes.keys()
    assert all(torch.equal(after[name], codes[name]) for name in codes)
    params = dict(model.named_parameters())
    assert all(torch.equal(params[name], value) for name, value in frozen.items())
    assert all(not torch.equal(params[name], value) for name, value in adapters.items())


@pytest.mark.parametrize("rank", [0, -1, 2.5, True])
def test_a_bad_rank_is_refused(rank):
    with pytest.raises(ValueError, match="rank must be a positive integer"):
        qlora_model(tiny_gpt2(), rank=rank)


def test_models_without_quantizable_layers_are_refused():
    with pytest.raises(ValueError, match="no transformer blocks"):
        qlora_model(nn.Sequential(nn.Linear(4, 4)))
    no_linears = nn.Module()
    no_linears.transformer = nn.Module()
    no_linears.transformer.h = nn.ModuleList([nn.LayerNorm(8), nn.LayerNorm(8)])
    with pytest.raises(ValueError, match="no Linear or Conv1D layers"):
        qlora_model(no_linears)


def test_a_missing_library_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # as if it were not installed
    with pytest.raises(ImportError, match="QLoRA needs peft and bitsandbytes"):
        qlora_model(tiny_gpt2())
