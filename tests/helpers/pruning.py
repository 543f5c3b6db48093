"""What the pruning tests share: the tiny GPT-2 and Llama (grouped-query attention, untied)
shapes, and the comparison of two sets of masks."""

import torch

from llmlab.models import preset

GPT2 = preset("tiny", vocab_size=256, context=32, n_layer=2, d_model=64, n_head=2)
LLAMA = GPT2.replace(family="llama", n_kv_head=1, d_ff=96, tied_embeddings=False)
SHAPES = {"gpt2": GPT2, "llama": LLAMA}


def same_masks(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
