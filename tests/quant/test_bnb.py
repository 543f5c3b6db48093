"""Library adapters on a tiny GPT-2 (Conv1D projections): bitsandbytes NF4 stores what the hand
NF4 codebook gives (Conv1D transposed correctly), torchao int8 in both kinds, bits per weight
read from the libraries' own tensors, the original model untouched, a CUDA request on a CPU
machine falls back with a warning, and bad input is refused."""

import pytest
import torch
from transformers.pytorch_utils import Conv1D

from llmlab.models import ModelShape, build_model, linear_from_conv1d
from llmlab.quant import nf4_dequantize, nf4_quantize
from llmlab.quant.bnb import nf4_bits_per_weight, nf4_model
from llmlab.quant.torchao_int8 import (
    int8_bits_per_weight,
    int8_model,
    replace_conv1d,
)

VOCAB, SEQ = 512, 32
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="the fall-back is for CPU machines")


def tiny():
    return build_model(ModelShape("gpt2", 2, 64, 4, VOCAB, SEQ)).eval()


def relative_logit_error(model, quantized):
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        reference, logits = model(ids).logits, quantized(ids).logits.float()
    return float((logits - reference).norm() / reference.norm())


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


def test_conv1d_becomes_an_equal_linear():
    conv = Conv1D(nf=12, nx=8)
    torch.nn.init.normal_(conv.bias)
    x = torch.randn(3, 8)
    torch.testing.assert_close(linear_from_conv1d(conv)(x), conv(x))
    model = tiny()
    replace_conv1d(model)
    assert not any(isinstance(m, Conv1D) for m in model.modules())


@pytest.mark.parametrize("kind", ["weight-only", "dynamic"])
def test_torchao_int8_quantizes_every_block_matrix(kind):
    from torchao.utils import TorchAOBaseTensor

    model = tiny()
    quantized = int8_model(model, kind)
    weights = [m.weight for m in quantized.modules() if isinstance(
        getattr(m, "weight", None), TorchAOBaseTensor)]  # fmt: skip
    assert len(weights) == 2 * 4
    assert not isinstance(quantized.lm_head.weight, TorchAOBaseTensor)  # tied to the embedding
    assert isinstance(model.transformer.h[0].attn.c_attn, Conv1D)
    assert 0 < relative_logit_error(model, quantized) < 0.05  # measured: 0.5% and 1%
    # 8-bit codes, a float32 scale and an int8 zero point per row; rows of 64 or 256 inputs
    block = [64 * 192, 64 * 64, 64 * 256, 256 * 64]  # c_attn, c_proj, c_fc, mlp c_proj
    extra = sum(n * 40 / inputs for n, inputs in zip(block, [64, 64, 64, 256], strict=True))
    assert int8_bits_per_weight(quantized) == pytest.approx(8 + extra / sum(block))


def test_dynamic_int8_also_quantizes_the_activations():
    model = tiny()
    weight_only = relative_logit_error(model, int8_model(model, "weight-only"))
    dynamic = relative_logit_error(model, int8_model(model, "dynamic"))
    assert dynamic > 1.2 * weight_only  # measured: about 2x


def test_torchao_state_dict_round_trips(tmp_path):
    quantized = int8_model(tiny(), "dynamic")
    torch.save(quantized.state_dict(), tmp_path / "int8.pt")
    again = int8_model(build_model(ModelShape("gpt2", 2, 64, 4, VOCAB, SEQ), seed=9), "dynamic")
    again.load_state_dict(torch.load(tmp_path / "int8.pt"), assign=True)
    assert relative_logit_error(quantized, again) == 0


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="unknown int8 kind"):
        int8_model(tiny(), "int4")
    with pytest.raises(ValueError, match="no torchao-quantized"):
        int8_bits_per_weight(tiny())


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
               for m in int8.modules()) == 7  # q, k, v, o, gate, up, down  # fmt: skip
    nf4 = nf4_model(llama)
    assert sum(isinstance(m, bnb.nn.Linear4bit) for m in nf4.modules()) == 7
    assert relative_logit_error(llama, int8) < 0.05 and relative_logit_error(llama, nf4) < 0.2
