"""bitsandbytes on a tiny GPT-2 (Conv1D projections): NF4 stores what the hand NF4 codebook gives
(Conv1D transposed correctly), bits per weight read from its own tensors, the original model
untouched, a CUDA request on a CPU machine falls back with a warning, and a Llama's linear layers
are quantized by both libraries."""

import pytest
import torch
from helpers.quant_models import SEQ, VOCAB, relative_logit_error, tiny
from transformers.pytorch_utils import Conv1D

from llmlab.models import ModelShape, build_model
from llmlab.quant import nf4_dequantize, nf4_quantize
from llmlab.quant.bnb import nf4_bits_per_weight, nf4_model
from llmlab.quant.torchao_int8 import int8_model

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="the fall-back is for CPU machines")


@pytest.mark.parametrize("double_quant", [False, True])
def test_bitsandbytes_nf4_stores_the_nf4_codebook(double_quant):
    import bitsandbytes as bnb

    model = tiny()
    quantized = nf4_model(model, double_quant=double_quant)
    layers = [m for m in quantized.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(layers) == 2 * 4  # c_attn, attn c_proj, c_fc, mlp c_proj per block
    stored = quantized.transformer.h[0].attn.c_attn.weight
    dequantized = bnb.functional.dequantize_4bit(stored.data, stored.quant_state)
    by_hand = nf4_dequantize(*nf4_quantize(model.transformer.h[0].attn.c_attn.weight.T))
    # the same codes; with double quantization the absmax itself is 8-bit, a small change
    torch.testing.assert_close(dequantized, by_hand, rtol=0, atol=3e-4 if double_quant else 1e-7)
    assert isinstance(model.transformer.h[0].attn.c_attn, Conv1D)  # the original is untouched
    assert relative_logit_error(model, quantized) < 0.2  # measured: 0.05


def test_nf4_bits_per_weight_counts_the_absmax():
    model = tiny()
    assert nf4_bits_per_weight(nf4_model(model, double_quant=False)) == 4 + 32 / 64
    # 8-bit absmax per 64 weights, a float32 absmax and offset per 256 blocks (here one block
    # of 192 absmax values in the 64 x 192 matrix): 4.127 on large layers, a little more here
    double = nf4_bits_per_weight(nf4_model(model))
    assert 4 + 8 / 64 + 64 / (64 * 256) <= double < 4 + 8 / 64 + 64 / (64 * 64)
    with pytest.raises(ValueError, match="no bitsandbytes Linear4bit"):
        nf4_bits_per_weight(model)


@NO_CUDA
def test_cuda_asked_for_on_a_cpu_machine_warns_and_falls_back():
    with pytest.warns(UserWarning, match="no CUDA GPU: torchao runs on the CPU"):
        quantized = int8_model(tiny(), device="cuda")
    assert next(quantized.parameters()).device.type == "cpu"
    with pytest.warns(UserWarning, match="no CUDA GPU: bitsandbytes runs on the CPU"):
        quantized = nf4_model(tiny(), device="cuda")
    assert quantized.transformer.h[0].attn.c_attn.weight.device.type == "cpu"


def test_llama_linear_layers_are_quantized_by_both_libraries():
    import bitsandbytes as bnb
    from torchao.utils import TorchAOBaseTensor

    llama = build_model(ModelShape("llama", 1, 64, 4, VOCAB, SEQ, d_ff=128, n_kv_head=2)).eval()
    int8 = int8_model(llama)
    assert sum(isinstance(getattr(m, "weight", None), TorchAOBaseTensor)
               for m in int8.modules()) == 7  # q, k, v, o, gate, up, down
    nf4 = nf4_model(llama)
    assert sum(isinstance(m, bnb.nn.Linear4bit) for m in nf4.modules()) == 7
    assert relative_logit_error(llama, int8) < 0.05 and relative_logit_error(llama, nf4) < 0.2
