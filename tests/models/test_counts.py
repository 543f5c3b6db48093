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


# A tiny Mixtral-style mixture of experts: 2 layers, 6 experts of width 96, top 2.
SMALL_MOE = models.preset("mixtral-8x7b").replace(
    n_layer=2, d_model=64, n_head=4, n_kv_head=2, d_ff=96, vocab_size=300, context=64,
    n_experts=6, top_k=2, source="")


def test_mixtral_has_its_published_total_and_active_parameters():
    """Mixtral of Experts (Jiang et al. 2024): 46.7B parameters, 12.9B active per token. By hand:
    attention 2 x 4096^2 + 2 x 4096 x 1024, an expert 3 x 4096 x 14,336, the router 8 x 4096, two
    norms; 32 layers; untied embedding and head; the final norm."""
    attention, expert, router, norms = 41_943_040, 176_160_768, 32_768, 8_192
    outside = 2 * 32000 * 4096 + 4096
    counts = models.count_parameters("mixtral-8x7b")
    active = models.count_active_parameters("mixtral-8x7b")
    assert counts.total == 32 * (attention + 8 * expert + router + norms) + outside
    assert active.total == 32 * (attention + 2 * expert + router + norms) + outside
    assert round(counts.total / 1e9, 1) == 46.7 and round(active.total / 1e9, 1) == 12.9
    assert models.expert_parameters("mixtral-8x7b") == 32 * 8 * expert
    assert models.expert_parameters("llama-7b") == 0


@pytest.mark.parametrize("top_k", [1, 2, 6])
def test_an_moe_shape_counts_what_transformers_builds_and_only_top_k_experts_are_active(top_k):
    shape = SMALL_MOE.replace(top_k=top_k)
    model = models.build_model(shape)
    assert type(model).__name__ == "MixtralForCausalLM"
    assert models.count_parameters(shape) == models.count_model_parameters(model)
    experts_left_out = (6 - top_k) * 3 * 64 * 96 * 2  # per layer, 2 layers
    assert (models.count_parameters(shape).total - models.count_active_parameters(shape).total
            == experts_left_out)
    # Training FLOPs follow the active parameters: 6 per active non-embedding parameter.
    flops = models.training_flops_per_token(shape, seq=32)
    assert flops.blocks == 6 * models.count_active_parameters(shape).non_embedding


def test_a_dense_shape_is_all_active():
    assert models.count_active_parameters("llama-7b") == models.count_parameters("llama-7b")
