"""The tiny GPT-2 the evaluation tests score, and a tokenizer with a model for generating text."""

import torch

from llmlab.data.tokenization import train_bpe
from llmlab.models import build_model, preset

TINY = preset("tiny", vocab_size=320, context=64, n_layer=2, d_model=64, n_head=2)
CODE = "def add(a, b):\n    return a + b\n# Add two numbers.\n"


def code_tokenizer():
    """A BPE tokenizer trained on one line of code: prompts like "def add" are a few tokens."""
    return train_bpe([CODE] * 20, vocab_size=300)


def generating_model(tokenizer):
    """An untrained one-layer GPT-2 for `tokenizer` (seeded: the same weights every time)."""
    torch.manual_seed(0)
    shape = preset("tiny", vocab_size=len(tokenizer), context=64, n_layer=1, d_model=32, n_head=2)
    return build_model(shape)
