"""`transformer_blocks` finds the repeated blocks that parallel strategies shard or split."""

import pytest
import torch
from torch import nn

from llmlab.models import (
    block_matrices,
    build_model,
    matrices_and_others,
    preset,
    transformer_blocks,
)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_blocks_are_the_decoder_layers(family):
    model = build_model(preset("tiny", family=family, vocab_size=64, context=16))
    blocks = transformer_blocks(model)
    assert isinstance(blocks, nn.ModuleList) and len(blocks) == model.config.num_hidden_layers


class Wrapper(nn.Module):
    """Keeps the model as `.module`, as DistributedDataParallel does."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module


def test_a_wrapped_model_is_looked_into():
    model = build_model(preset("tiny", vocab_size=64, context=16))
    assert transformer_blocks(Wrapper(model)) is model.transformer.h


def test_unknown_model_names_what_is_expected():
    with pytest.raises(TypeError, match="transformer.h"):
        transformer_blocks(torch.nn.Linear(2, 2))


def test_the_blocks_matrices_and_every_other_trainable_parameter_split_the_model():
    model = build_model(preset("tiny", n_layer=2, d_model=64, n_head=2, vocab_size=128))
    model.transformer.h[1].mlp.c_proj.weight.requires_grad_(False)  # frozen: in neither list
    matrices, others = matrices_and_others(model)
    frozen = model.transformer.h[1].mlp.c_proj.weight
    assert [id(p) for p in matrices] == [id(m.weight) for m in block_matrices(model).values()
                                         if m.weight is not frozen]
    assert all(p.dim() == 2 for p in matrices)
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert {id(p) for p in matrices}.isdisjoint(id(p) for p in others)
    assert {id(p) for p in matrices} | {id(p) for p in others} == trainable
