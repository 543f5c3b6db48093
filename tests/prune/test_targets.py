"""The weights pruning may touch: tied embeddings are refused, and the error says what would be
pruned; an untied LM head may be pruned."""


import pytest
import torch
from helpers.pruning import GPT2, LLAMA

from llmlab.models import build_model
from llmlab.prune import (
    apply_masks,
    global_masks,
    prunable_weights,
)


def test_tied_embeddings_are_refused_and_the_error_says_what_would_be_pruned():
    model = build_model(GPT2)  # the LM head shares the token embedding
    assert model.lm_head.weight is model.transformer.wte.weight
    with pytest.raises(ValueError, match="ties its LM head to the token embedding"):
        global_masks(model, 0.5, names=["lm_head.weight"])
    with pytest.raises(ValueError, match="input embedding and in the output layer"):
        prunable_weights(model, include_embeddings=True)
    wte = {"transformer.wte.weight": torch.ones_like(model.transformer.wte.weight)}
    with pytest.raises(ValueError, match="ties its LM head"):
        apply_masks(model, wte)
    untied = build_model(LLAMA)  # its own LM head: both may be pruned
    names = prunable_weights(untied, include_embeddings=True)
    assert {"model.embed_tokens.weight", "lm_head.weight"} <= set(names)
