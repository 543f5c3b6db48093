"""`transformer_blocks` finds the repeated blocks that parallel strategies shard or split."""

import pytest
import torch
from torch import nn

from llmlab.models import build_model, preset, transformer_blocks


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
