"""What the tests of the quantization libraries' adapters share: a tiny GPT-2 (Conv1D
projections) and the relative error of a quantized copy's logits."""

import torch

from llmlab.models import ModelShape, build_model

VOCAB, SEQ = 512, 32


def tiny():
    return build_model(ModelShape("gpt2", 2, 64, 4, VOCAB, SEQ)).eval()


def relative_logit_error(model, quantized):
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        reference, logits = model(ids).logits, quantized(ids).logits.float()
    return float((logits - reference).norm() / reference.norm())
