"""torchao int8 on a tiny GPT-2 (Conv1D projections): Conv1D becomes an equal Linear, every block
matrix quantized in both kinds (dynamic int8 quantizes the activations too), bits per weight read
from torchao's own tensors, the state dict round-trips, bad input refused."""

import pytest
import torch
from helpers.quant_models import SEQ, VOCAB, relative_logit_error, tiny
from transformers.pytorch_utils import Conv1D

from llmlab.models import ModelShape, build_model, linear_from_conv1d
from llmlab.quant.torchao_int8 import (
    int8_bits_per_weight,
    int8_model,
    replace_conv1d,
)


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
        getattr(m, "weight", None), TorchAOBaseTensor)]
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
