"""Activation outliers and LLM.int8() by hand: a planted outlier feature is found from a tiny
model's calibration inputs, the decomposition beats plain int8 on it, vector-wise int8 is exact
on its grid, and bitsandbytes' Linear8bitLt on CPU computes what the hand version does."""

import pytest
import torch

from llmlab.models import ModelShape, build_model
from llmlab.quant import record_inputs
from llmlab.quant.bnb import int8_linear
from llmlab.quant.outliers import (
    feature_absmax,
    int8_matmul,
    llm_int8_matmul,
    matmul_errors,
    outlier_features,
)

VOCAB, SEQ, PLANTED = 512, 32, 37
FC = "transformer.h.1.mlp.c_fc"


def calibration(seed=1, count=2):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (4, SEQ), generator=generator) for _ in range(count)]


def model_with_planted_outlier():
    """A tiny GPT-2 whose second block's MLP input has one feature 40x the others: its layer
    norm's gain on that feature (how outlier features look in trained LLMs)."""
    model = build_model(ModelShape("gpt2", 2, 64, 4, VOCAB, SEQ))
    with torch.no_grad():
        model.transformer.h[1].ln_2.weight[PLANTED] = 40.0
    return model


def layer_input_with_outliers(seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 256, generator=generator)
    x[:, 7] *= 30  # two outlier features, as in the paper's Figure 3 (a few of thousands)
    x[:, 100] *= 20
    weight = torch.randn(128, 256, generator=generator) * 0.05
    return x.half().float(), weight.half().float()  # on the fp16 grid, as bitsandbytes reads it


def test_a_planted_outlier_feature_is_found():
    absmax = feature_absmax(model_with_planted_outlier(), [FC], calibration())
    assert absmax[FC].shape == (64,)
    assert outlier_features(absmax[FC]).tolist() == [PLANTED]


def test_feature_absmax_is_the_max_over_the_recorded_inputs():
    model, batches = model_with_planted_outlier(), calibration()
    recorded = torch.cat(record_inputs(model, [FC], batches)[FC])
    torch.testing.assert_close(feature_absmax(model, [FC], batches)[FC], recorded.abs().amax(0))


def test_the_decomposition_beats_plain_int8_on_outliers():
    errors = matmul_errors(*layer_input_with_outliers())
    assert errors["LLM.int8()"] < 0.2 * errors["int8"], errors  # measured: 0.12x


def test_without_outliers_the_decomposition_is_plain_int8():
    x, weight = torch.randn(16, 32), torch.randn(8, 32)
    assert torch.equal(llm_int8_matmul(x, weight, threshold=100.0), int8_matmul(x, weight))


def test_int8_matmul_is_exact_on_the_grid():
    codes = torch.randint(-127, 128, (5, 16)).float()
    codes[:, 0] = 127  # each row's absmax on the top code: scale exactly 1 / 127 of it
    x, weight = codes * 0.5, codes[:3] * 0.25
    torch.testing.assert_close(int8_matmul(x, weight), x @ weight.T)


@pytest.mark.parametrize("outlier_weights", ["float", "int8"])
def test_bad_shapes_and_options_are_refused(outlier_weights):
    with pytest.raises(ValueError, match="same `in`"):
        llm_int8_matmul(torch.ones(2, 4), torch.ones(3, 5), outlier_weights=outlier_weights)
    with pytest.raises(ValueError, match="outlier_weights"):
        llm_int8_matmul(torch.ones(2, 4), torch.ones(3, 4), outlier_weights="fp16")


def test_bitsandbytes_linear8bitlt_matches_the_hand_decomposition():
    x, weight = layer_input_with_outliers()
    with torch.no_grad():
        plain = int8_linear(weight, threshold=0.0)(x.half()).float()
        split = int8_linear(weight, threshold=6.0)(x.half()).float()

    def gap(a, b):
        return float((a - b).norm() / b.norm())

    assert gap(plain, int8_matmul(x, weight)) < 1e-3  # measured: 2e-4 (its fp16 output)
    # bitsandbytes keeps only the int8 weight, so its outlier columns come from there too
    assert gap(split, llm_int8_matmul(x, weight, outlier_weights="int8")) < 4e-3  # measured 2.3e-3
    assert gap(split, llm_int8_matmul(x, weight, outlier_weights="float")) > 5e-3  # 6.8e-3
