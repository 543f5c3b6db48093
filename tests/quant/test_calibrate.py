"""Calibration capture on tiny GPT-2 and Llama models with a random-token stream: recorded inputs
are the layers' real inputs, hooks never stay behind, bad input is refused."""

import pytest
import torch
from helpers.calibration import SEQ, SHAPES, calibration

from llmlab.models import build_model
from llmlab.quant import record_inputs


def test_record_inputs_are_the_layers_real_inputs():
    model = build_model(SHAPES["gpt2"])
    batches = calibration(count=2)
    recorded = record_inputs(model, ["lm_head", "transformer.h.1.mlp.c_proj"], batches, window=16)
    assert model.training  # its mode is given back (eval only while recording)
    model.eval()
    with torch.no_grad():
        outputs = [model(ids[:, :16], output_hidden_states=True) for ids in batches]
    hidden = [output.hidden_states[-1] for output in outputs]
    for got, expected in zip(recorded["lm_head"], hidden, strict=True):
        torch.testing.assert_close(got, expected.reshape(-1, 64))  # the head reads ln_f's output
    assert [x.shape for x in recorded["transformer.h.1.mlp.c_proj"]] == [(4 * 16, 256)] * 2


def test_hooks_are_removed_even_when_the_forward_fails():
    model = build_model(SHAPES["gpt2"])
    layer = model.transformer.h[0].attn.c_attn
    with pytest.raises(IndexError):  # more positions than the model has: its forward fails
        record_inputs(model, ["transformer.h.0.attn.c_attn"], [torch.zeros(1, SEQ + 1).long()])
    assert not layer._forward_pre_hooks
    record_inputs(model, ["transformer.h.0.attn.c_attn"], calibration(count=1))
    assert not layer._forward_pre_hooks


def test_record_inputs_refuses_bad_input():
    model = build_model(SHAPES["gpt2"])
    name = ["transformer.h.0.attn.c_attn"]
    with pytest.raises(ValueError, match="got none"):
        record_inputs(model, name, [])
    with pytest.raises(ValueError, match="fewer than one window of 32"):
        record_inputs(model, name, [torch.zeros(2, 64, dtype=torch.long),
                                    torch.zeros(2, 16, dtype=torch.long)], window=32)
    with pytest.raises(ValueError, match=r"expected token ids shaped \(batch, seq\)"):
        record_inputs(model, name, [torch.zeros(64, dtype=torch.long)])
    with pytest.raises(KeyError, match="no module named 'transformer.h.9.attn'"):
        record_inputs(model, ["transformer.h.9.attn"], calibration(count=1))
    with pytest.raises(TypeError, match="not a Linear or Conv1D"):
        record_inputs(model, ["transformer.ln_f"], calibration(count=1))
