"""What the quantization-aware training tests share: tiny GPT-2 and Llama shapes, the group size,
and the lag of the token chains they learn."""

from llmlab.models import ModelShape

VOCAB, SEQ, GROUP, LAG = 256, 64, 32, 2

SHAPES = {
    "gpt2": ModelShape("gpt2", 2, 64, 4, VOCAB, SEQ),
    "llama": ModelShape("llama", 2, 64, 4, VOCAB, SEQ, d_ff=128, n_kv_head=2),
}

SHAPE = SHAPES["gpt2"]
