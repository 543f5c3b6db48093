"""What the tests of calibration and whole-model quantization share: tiny GPT-2 and Llama shapes
and a random-token calibration stream."""

import torch

from llmlab.models import ModelShape

VOCAB, SEQ = 512, 64

SHAPES = {
    "gpt2": ModelShape("gpt2", 2, 64, 4, VOCAB, SEQ),
    "llama": ModelShape("llama", 2, 64, 4, VOCAB, SEQ, d_ff=128, n_kv_head=2),
}


def calibration(seed=1, count=4):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (4, SEQ), generator=generator) for _ in range(count)]
