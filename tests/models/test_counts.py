"""Parameter and FLOP counts: the formula equals the built model, the presets have the published
counts, tied embeddings count once, pipeline stages hold the embeddings first and the head last,
and the FLOP formula agrees with PyTorch's FlopCounterMode on a real forward and backward."""

import pytest
import torch

from llmlab import models

# Published totals: Hugging Face model cards / configs (GPT-2), Meta's Llama 2 and Llama 3.2.
PUBLISHED_PARAMETERS = {
    "gpt2-124m": 124_439_808,
    "gpt2-350m": 354_823_168,
    "gpt2-1.5b": 1_557_611_200,
    "llama-1b": 1_235_814_400,
    "llama-7b": 6_738_415_616,
    "llama-13b": 13_015_864_320,
    "llama-70b": 68_976_648_192,
}


@pytest.mark.parametrize("name", models.PRESETS)
def test_formula_counts_equal_the_built_model_on_the_meta_device(name):
    model = models.build_model(name, device="meta")
    assert all(p.is_meta for p in model.parameters())  # no memory behind the weights
    assert models.count_parameters(name) == models.count_model_parameters(model)
    assert sum(models.parameter_table(model).values()) == models.count_parameters(name).total


@pytest.mark.parametrize("name, total", PUBLISHED_PARAMETERS.items())
def test_presets_have_the_published_parameter_counts(name, total):
    assert models.count_parameters(name).total == total


def test_tied_embeddings_are_counted_once():
    model = models.build_model("tiny", device="meta")
    assert model.lm_head.weight is model.transformer.wte.weight
    counts = models.count_parameters("tiny")
    untied = models.count_parameters(models.preset("tiny", tied_embeddings=False))
    assert untied.total - counts.total == 2048 * 256
    assert counts.embedding == (2048 + 256) * 256  # tokens and positions


@pytest.mark.parametrize("tied", [True, False])
def test_pipeline_stages_hold_the_embeddings_first_and_the_head_last(tied):
    shape = models.preset("tiny", tied_embeddings=tied)  # 4 blocks, width 256, 2048 tokens
    block, vocabulary, positions = models.block_parameters(shape), 2048 * 256, 256 * 256
    final_norm = 2 * 256  # LayerNorm: a scale and a shift
    first = models.stage_parameters(shape, 2, first=True, last=False)
    last = models.stage_parameters(shape, 2, first=False, last=True)
    assert first == 2 * block + vocabulary + positions
    assert last == 2 * block + final_norm + vocabulary  # a tied head too: a copy on its stage
    whole = models.stage_parameters(shape, 4, first=True, last=True)
    assert whole == models.count_parameters(shape).total  # one stage: the tied matrix once
    assert first + last == whole + (vocabulary if tied else 0)


def test_block_parameters_of_a_gpt2_block_are_12_d_squared_plus_13_d():
    d = 768
    assert models.block_parameters(models.preset("gpt2-124m")) == 12 * d * d + 13 * d


@pytest.mark.parametrize("name, seq", [("tiny", 256), ("small", 128)])
def test_flops_formula_agrees_with_flop_counter_mode(name, seq):
    """Eager attention, so the attention matmuls are visible to the counter (on the CPU, the fused
    kernel is an op FlopCounterMode has no formula for). The formula counts 6 FLOPs for every
    non-embedding parameter, biases and norm scales included, which are not matmul weights: that
    is the 0.2-0.3% it is above the counter."""
    model = models.build_model(name, attention="eager")
    x = torch.randint(0, models.SMOKE_VOCAB, (2, seq))
    measured = models.measure_training_flops(model, x) / x.numel()
    predicted = models.training_flops_per_token(name, seq).total
    assert measured == pytest.approx(predicted, rel=0.005)
    assert measured < predicted


def test_flops_per_token_grow_with_the_sequence_only_through_attention():
    short, long = (models.training_flops_per_token("gpt2-124m", seq) for seq in (512, 1024))
    assert (short.blocks, short.lm_head) == (long.blocks, long.lm_head)
    assert long.attention == 2 * short.attention == 12 * 12 * 1024 * 768
