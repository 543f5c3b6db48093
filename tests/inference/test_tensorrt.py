"""TensorRT runs only on a CUDA machine with Torch-TensorRT installed; elsewhere it says why."""

import pytest
import torch
from helpers.train_fakes import tiny_gpt2, token_ids

from llmlab.inference.tensorrt import compile_tensorrt, tensorrt_unavailable


@pytest.fixture(scope="module")
def model():
    return tiny_gpt2(width=64, context=32).eval()



@pytest.mark.skipif(tensorrt_unavailable() is None, reason="TensorRT is available here")
def test_tensorrt_says_why_it_cannot_run(model):
    with pytest.raises(RuntimeError, match="TensorRT cannot run here: "):
        compile_tensorrt(model, token_ids(1, 8))


@pytest.mark.gpu
@pytest.mark.skipif(tensorrt_unavailable() is not None, reason=str(tensorrt_unavailable()))
def test_tensorrt_gives_pytorchs_most_likely_tokens(model):
    tokens = token_ids(2, 16).cuda()
    compiled = compile_tensorrt(model, tokens)
    with torch.no_grad():
        expected = model.cuda()(tokens).logits
    assert (compiled(tokens).argmax(-1) == expected.argmax(-1)).float().mean() > 0.99
