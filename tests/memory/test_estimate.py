"""The memory planner reproduces published figures, never returns a negative or NaN size, and
refuses bad set-ups with a message that names the problem."""

import math

import pytest

from llmlab import memory
from llmlab.memory import GB, TrainingSetup, estimate_memory, model_states, tensor_parallel_problem
from llmlab.models import PRESETS, ModelShape, block_matrices, build_model, count_parameters, preset

MIXED_ADAM = TrainingSetup(dtype="fp16", optimizer="adam")  # the ZeRO paper's set-up


def test_a_billion_fp32_weights_take_4_gb():
    """The seed's starting point: 1e9 parameters x 4 bytes."""
    assert model_states(1e9, TrainingSetup(dtype="fp32"))["weights"] == 4 * GB


def test_fp32_adam_needs_16_bytes_per_parameter_before_activations():
    """The seed adds 8 more bytes per parameter "for activations and temporaries" to reach 24 GB
    per billion; activations depend on batch and sequence, not on the parameter count."""
    setup = TrainingSetup(dtype="fp32", optimizer="adamw")
    assert memory.bytes_per_parameter(setup) == 16
    small, large = (estimate_memory("llama-1b", setup, batch=b, seq=2048) for b in (1, 8))
    assert large.items["block activations"] == 8 * small.items["block activations"]
    assert large.items["weights"] == small.items["weights"]


def test_zero_paper_mixed_precision_adam_is_16_bytes_per_parameter():
    """Rajbhandari et al. 2020, section 3.1: 2 (fp16 weights) + 2 (fp16 gradients) + K = 12
    (fp32 master weights, momentum, variance)."""
    states = model_states(1, MIXED_ADAM)
    assert states["weights"] == 2 and states["gradients"] == 2
    assert states["master weights"] + states["optimizer states"] == 12


def test_zero_paper_gpt2_1_5b_example():
    """Section 3.1: a 1.5B-parameter GPT-2 has 3 GB of fp16 weights and needs at least 24 GB
    for its model states with mixed-precision Adam."""
    states = model_states(1.5e9, MIXED_ADAM)
    assert states["weights"] == pytest.approx(3 * GB)
    assert sum(states.values()) == pytest.approx(24 * GB)


@pytest.mark.parametrize(
    "stage, published_gb", [(0, 120), (1, 31.4), (2, 16.6), (3, 1.9)]
)
def test_zero_paper_7_5b_on_64_gpus_per_stage(stage, published_gb):
    """Figure 1: 7.5B parameters, 64 data-parallel GPUs; baseline, Pos, Pos+g, Pos+g+p."""
    states = model_states(7.5e9, MIXED_ADAM.replace(zero=stage, gpus=64))
    assert sum(states.values()) / GB == pytest.approx(published_gb, abs=0.05)


def test_autocast_convention_is_18_bytes_per_parameter():
    """Hugging Face's guide: fp32 weights 4 + 16-bit copies 2 + fp32 gradients 4 + Adam 8."""
    assert memory.bytes_per_parameter(TrainingSetup(fp32_grads=True)) == 18
    assert memory.bytes_per_parameter(TrainingSetup()) == 16


def test_8bit_adam_and_pure_16_bit():
    assert model_states(1, TrainingSetup(optimizer="adam-8bit"))["optimizer states"] == (
        pytest.approx(2.03125)
    )
    pure = model_states(1, TrainingSetup(dtype="bf16", master_weights=False))
    assert sum(pure.values()) == 2 + 2 + 4  # weights, gradients, two bf16 moments


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_muon_keeps_one_state_on_the_blocks_matrices_and_adamws_two_on_the_rest(family):
    """The planner's matrices, by formula, are the ones the trainer gives Muon (the blocks'
    Linear / Conv1D weights of the built model)."""
    shape = preset("tiny", family=family)
    matrices = sum(layer.weight.numel() for layer in block_matrices(build_model(shape)).values())
    total = count_parameters(shape).total
    states = estimate_memory(shape, optimizer="muon", dtype="fp32").items["optimizer states"]
    assert states == 4 * (1 * matrices + 2 * (total - matrices))
    head_only = estimate_memory(shape, optimizer="muon", head_only=True)  # the head is AdamW's
    assert head_only.items["optimizer states"] == 2 * 4 * shape.vocab_size * shape.d_model


def test_muon_model_states_need_to_know_which_parameters_are_matrices():
    setup = TrainingSetup(optimizer="muon")
    assert model_states(10, setup, muon_params=6)["optimizer states"] == 4 * (6 + 2 * 4)
    for muon_params in (None, 11):
        with pytest.raises(ValueError, match="how many of the 10 are the blocks' matrices"):
            model_states(10, setup, muon_params=muon_params)


def test_fused_attention_drops_the_sequence_squared_term():
    shape, seq = preset("gpt2-124m"), 1024
    eager = memory.layer_activations(shape, TrainingSetup(seq=seq, attention="eager"))
    fused = memory.layer_activations(shape, TrainingSetup(seq=seq, attention="sdpa"))
    assert eager["attention scores"] == shape.n_head * seq * 2
    assert "attention scores" not in fused
    # The textbook count (Korthikanti et al. 2022, without dropout): 16 d + heads x seq values.
    assert sum(eager.values()) == (16 * shape.d_model + shape.n_head * seq) * 2


def test_checkpointing_keeps_only_each_block_input():
    shape = preset("llama-7b")
    setup = TrainingSetup(batch=2, seq=1024, checkpointing=True)
    kept = memory.block_activation_bytes(shape, setup)
    assert kept == 2 * 1024 * shape.n_layer * shape.d_model * 2
    estimate = estimate_memory(shape, setup)
    full = estimate_memory(shape, setup.replace(checkpointing=False))
    assert estimate.items["block activations"] < full.items["block activations"] / 10


def test_sharding_and_tensor_parallelism_divide_the_states():
    one = estimate_memory("llama-13b", batch=1, seq=2048)
    zero3 = estimate_memory("llama-13b", batch=1, seq=2048, zero=3, gpus=8)
    tp = estimate_memory("llama-13b", batch=1, seq=2048, tensor_parallel=4, gpus=4)
    for item in ("weights", "gradients", "optimizer states"):
        assert zero3.items[item] == pytest.approx(one.items[item] / 8)
        assert tp.items[item] == pytest.approx(one.items[item] / 4)
    # Norms and the inputs of the first matmuls stay whole on every GPU (no sequence parallelism).
    assert tp.items["block activations"] < 0.6 * one.items["block activations"]
    assert "gathered blocks" in zero3.items


def test_ddp_keeps_a_second_copy_of_the_gradients():
    ddp = estimate_memory("gpt2-124m", batch=4, gpus=4)
    assert ddp.items["DDP gradient buckets"] == ddp.items["gradients"]
    zero1 = estimate_memory("gpt2-124m", batch=4, gpus=4, zero=1)  # ZeroRedundancyOptimizer + DDP
    assert zero1.items["DDP gradient buckets"] == ddp.items["gradients"]
    assert "DDP gradient buckets" not in estimate_memory("gpt2-124m", batch=4, gpus=4, zero=2).items


def test_lora_and_qlora():
    full = estimate_memory("llama-7b", batch=1, seq=2048)
    lora = estimate_memory("llama-7b", batch=1, seq=2048, lora_rank=16)
    qlora = estimate_memory("llama-7b", batch=1, seq=2048, lora_rank=16, weights_4bit="nf4")
    adapters = 32 * 16 * (4 * (4096 + 4096) + 3 * (4096 + 11008))  # 40.0M trainable
    assert lora.items["gradients"] == adapters * 2
    assert lora.items["weights"] == pytest.approx(full.items["weights"] + adapters * 2)
    # NF4 with double quantization: 4.127 bits per block weight; embeddings stay 16-bit.
    block_weights = 6_476_005_376
    expected = (6_738_415_616 - block_weights) * 2 + block_weights * 4.127 / 8 + adapters * 2
    assert qlora.items["weights"] == pytest.approx(expected, rel=1e-4)
    assert qlora.peak < lora.peak < full.peak


def test_head_only_trains_the_head_and_keeps_no_block_activations():
    full = estimate_memory("gpt2-124m", batch=4, seq=512, dtype="fp32", attention="eager")
    head = estimate_memory("gpt2-124m", batch=4, seq=512, dtype="fp32", attention="eager",
                           head_only=True)
    matrix = 50257 * 768  # GPT-2 ties its head to the embedding: training it makes a copy
    assert head.items["gradients"] == matrix * 4
    assert head.items["optimizer states"] == matrix * 8
    assert head.items["weights"] == (count_parameters("gpt2-124m").total + matrix) * 4
    for gone in ("block activations", "block in backward", "attention backward"):
        assert gone in full.items and gone not in head.items
    # What the head keeps: the final hidden state (the head's input) and the log-probabilities.
    assert head.items["head activations"] == 4 * 512 * (768 * 4 + 50257 * 4)
    untied = estimate_memory("llama-7b", batch=1, seq=256, head_only=True)
    assert untied.items["weights"] == pytest.approx(6_738_415_616 * 2, rel=1e-6)
    with pytest.raises(ValueError, match="set lora_rank=0"):
        TrainingSetup(head_only=True, lora_rank=8)
    with pytest.raises(ValueError, match="pipeline_stages=1"):
        estimate_memory("gpt2-124m", head_only=True, pipeline_stages=2, pipeline_stage=1)


def test_the_peak_is_one_moment_not_the_sum_of_everything():
    estimate = estimate_memory("tiny", batch=4, seq=256, dtype="fp32")
    assert estimate.peak_phase == "start of backward"
    assert "gradients" not in estimate.peak_items  # freed by zero_grad between steps
    assert estimate.peak < sum(estimate.items.values())
    # Large weights and a short batch: the optimizer step is the peak.
    assert estimate_memory("llama-7b", batch=1, seq=256).peak_phase == "optimizer step"


SETUPS = [
    TrainingSetup(),
    TrainingSetup(dtype="fp32", optimizer="sgd", batch=3, seq=7),
    TrainingSetup(optimizer="sgd-momentum", checkpointing=True, grad_accumulation=4),
    TrainingSetup(attention="eager", zero=1, gpus=2),
    TrainingSetup(zero=3, gpus=16, tensor_parallel=8, fp32_grads=True),
    TrainingSetup(dtype="fp16", master_weights=False, optimizer="adam-8bit"),
    TrainingSetup(lora_rank=8, weights_4bit="gptq", checkpointing=True),
    TrainingSetup(optimizer="muon", zero=1, gpus=4),
]


@pytest.mark.parametrize("setup", SETUPS, ids=range(len(SETUPS)))
@pytest.mark.parametrize("name", PRESETS)
def test_no_figure_is_ever_negative_or_nan(name, setup):
    setup = setup.replace(seq=min(setup.seq, PRESETS[name].context))
    if tensor_parallel_problem(name, setup.tensor_parallel):  # tiny's 4 heads do not split 8 ways
        with pytest.raises(ValueError, match="tensor parallel degree"):
            estimate_memory(name, setup)
        return
    if PRESETS[name].n_experts and (setup.lora_rank or setup.optimizer == "muon"):
        with pytest.raises(ValueError, match="for dense models only"):
            estimate_memory(name, setup)
        return
    estimate = estimate_memory(name, setup)
    assert all(math.isfinite(v) and v > 0 for v in estimate.items.values())
    assert estimate.items["weights"] + estimate.items.get("optimizer states", 0) <= estimate.peak
    assert estimate.peak <= sum(estimate.items.values()) and math.isfinite(estimate.total)


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"dtype": "fp8"}, "unknown dtype 'fp8': use one of"),
        ({"optimizer": "lion"}, "unknown optimizer 'lion': use one of"),
        ({"attention": "flash"}, "unknown attention"),
        ({"newton_schulz_dtype": "fp16"}, "unknown newton_schulz_dtype"),
        ({"batch": 0}, "batch must be a positive integer"),
        ({"seq": -1}, "seq must be a non-negative integer"),
        ({"zero": 4}, "ZeRO stage 0, 1, 2 or 3"),
        ({"gpus": 6, "tensor_parallel": 4}, "not a multiple of tensor_parallel"),
        ({"weights_4bit": "nf4"}, "set lora_rank"),
        ({"weights_4bit": "int3", "lora_rank": 4}, "unknown 4-bit format"),
        ({"master_weights": False, "fp32_grads": True}, "needs master_weights"),
        ({"optimizer": "muon", "lora_rank": 8}, "Muon trains whole weight matrices"),
        ({"gpus": 8, "context_parallel": 3}, "not a multiple of tensor_parallel x context_par"),
        ({"gpus": 8, "expert_parallel": 3}, "does not divide the 8 GPUs that hold the same"),
        ({"gpus": 8, "tensor_parallel": 2, "expert_parallel": 8}, "does not divide the 4 GPUs"),
        ({"context_parallel": 0}, "context_parallel must be a positive integer"),
    ],
)
def test_bad_setups_are_refused_with_a_clear_message(changes, words):
    with pytest.raises(ValueError, match=words):
        TrainingSetup(**changes)


def test_bad_model_or_sequence_is_refused():
    with pytest.raises(ValueError, match="the presets are tiny"):
        estimate_memory("gpt-5")
    with pytest.raises(ValueError, match="longer than the model's context 256"):
        estimate_memory("tiny", seq=512)
    with pytest.raises(ValueError, match="non-negative"):
        model_states(-1, TrainingSetup())


def test_table_shows_every_item():
    estimate = estimate_memory("llama-7b", batch=8, seq=2048, zero=3, gpus=8)
    table = estimate.table()
    assert all(name in table for name in estimate.items)
    assert "peak, at the start of backward" in table and "CUDA context (assumed)" in table


def test_lora_under_autocast_keeps_frozen_weights_in_fp32_with_16_bit_copies():
    """torch.autocast (fp32_grads=True) leaves every weight fp32; each frozen matrix a matmul
    uses gets a 16-bit copy that backward keeps, except 4-bit ones (dequantized per call)."""
    blocks = 4 * (256 * 768 + 256 * 256 + 2 * 256 * 1024)
    head, adapters = 2048 * 256, 4 * 8 * (1024 + 512 + 1280 + 1280)
    frozen = count_parameters("tiny").total - blocks
    lora = estimate_memory("tiny", dtype="bf16", fp32_grads=True, lora_rank=8)
    assert lora.items["weights"] == (frozen + blocks + adapters) * 4
    assert lora.items["16-bit weight copies"] == 2 * (adapters + head + blocks)
    qlora = estimate_memory("tiny", dtype="bf16", fp32_grads=True, lora_rank=8, weights_4bit="nf4")
    nf4_bytes = blocks * memory.WEIGHT_BITS_4BIT["nf4"] / 8
    assert qlora.items["weights"] == pytest.approx(frozen * 4 + nf4_bytes + adapters * 4)
    assert qlora.items["16-bit weight copies"] == 2 * (adapters + head)
    plain = estimate_memory("tiny", dtype="bf16", lora_rank=8)  # 16-bit weights: no copies
    assert "16-bit weight copies" not in plain.items


def test_scoring_the_last_tokens_alone_keeps_their_log_probabilities_alone():
    # logits_to_keep=13 on 128-token rows (a completion after its prompt): the final norm and
    # the head's input stay for all 128 tokens, the fp32 log-probabilities and the loss's two
    # buffers only for the 13 scored.
    full = estimate_memory(SMALL, batch=2, seq=128, dtype="fp32")
    kept = estimate_memory(SMALL, batch=2, seq=128, dtype="fp32", scored_tokens=13)
    assert full.items["head activations"] == 2 * 128 * (64 * 4 + 64 * 4 + 1000 * 4)
    assert kept.items["head activations"] == 2 * (128 * (64 * 4 + 64 * 4) + 13 * 1000 * 4)
    assert kept.items["loss buffers"] == 2 * 2 * 13 * 1000 * 4
    assert kept.items["block activations"] == full.items["block activations"]
    # More than the sequence is the whole sequence; a negative count is refused.
    whole = estimate_memory(SMALL, batch=2, seq=128, dtype="fp32", scored_tokens=500)
    assert whole.items == full.items
    with pytest.raises(ValueError, match="scored_tokens"):
        TrainingSetup(scored_tokens=-1)


# A small GPT-2 in 2 pipeline stages of 2 blocks: width 64, 4 heads, 1000 tokens, 128 positions.
SMALL = ModelShape("gpt2", n_layer=4, d_model=64, n_head=4, vocab_size=1000, context=128)
SMALL_BLOCK = 12 * 64 * 64 + 13 * 64  # 49,984 parameters
SMALL_STEP = TrainingSetup(batch=1, seq=128, checkpointing=True, grad_accumulation=8)


def test_each_pipeline_stage_holds_its_own_parameters_and_micro_batches():
    first, last = (estimate_memory(SMALL, SMALL_STEP, pipeline_stage=i, pipeline_stages=2)
                   for i in (0, 1))
    bf16 = 2
    # The first stage: 2 blocks, the token and position embeddings; 1F1B keeps 2 micro-batches
    # in flight, each 128 tokens x 2 blocks x their 64-wide input (activation checkpointing).
    assert first.items["weights"] == (2 * SMALL_BLOCK + (1000 + 128) * 64) * bf16
    assert first.items["block activations"] == 2 * 128 * 2 * 64 * bf16
    assert "head activations" not in first.items and "loss buffers" not in first.items
    # The last stage: 2 blocks, the final LayerNorm and (a copy of) the tied LM head; 1 in flight.
    assert last.items["weights"] == (2 * SMALL_BLOCK + 2 * 64 + 1000 * 64) * bf16
    assert last.items["block activations"] == 1 * 128 * 2 * 64 * bf16
    # Head: the final norm's input, the head's input and fp32 log-probabilities, per token.
    assert last.items["head activations"] == 128 * (64 * bf16 + 64 * bf16 + 1000 * 4)
    assert last.items["loss buffers"] == 2 * 128 * 1000 * 4
    # One micro-batch's backward at a time: one block recomputed, 2304 bytes a token in GPT-2
    # (norms, attention input, q, k, v and the fused kernel's copies of two, output, MLP).
    per_token = (2 * 64 + 64 + 3 * 64 + 2 * 64 + 64 + 64 + 2 * 256) * bf16
    assert per_token == 2304
    for stage in (first, last):
        assert stage.items["block in backward"] == 128 * per_token
    assert (first.pipeline_stage, last.pipeline_stage, last.pipeline_stages) == (0, 1, 2)
    assert "stage 1 of 0-1" in last.table().splitlines()[0]


def test_one_pipeline_stage_is_the_whole_model():
    assert estimate_memory(SMALL, SMALL_STEP) == estimate_memory(
        SMALL, SMALL_STEP, pipeline_stage=0, pipeline_stages=1)


@pytest.mark.parametrize("stage, stages, words", [
    (0, 5, "pipeline_stages must be 1 to the model's 4 layers"),
    (0, 0, "pipeline_stages must be 1"),
    (2, 2, "pipeline_stage must be 0 to 1"), (-1, 2, "pipeline_stage must be 0 to 1"),
])
def test_a_stage_outside_the_pipeline_is_refused(stage, stages, words):
    with pytest.raises(ValueError, match=words):
        estimate_memory(SMALL, SMALL_STEP, pipeline_stage=stage, pipeline_stages=stages)


@pytest.mark.parametrize("changes, words", [
    ({"tensor_parallel": 8, "gpus": 8}, "more than the model's 4 attention heads"),
    ({"tensor_parallel": 3, "gpus": 3}, "does not divide the model's 4 attention heads"),
    ({"lora_rank": 65}, "lora_rank=65 is more than 64, the smallest side"),
])
def test_numbers_the_model_cannot_take_are_refused(changes, words):
    with pytest.raises(ValueError, match=words):
        estimate_memory(SMALL, SMALL_STEP.replace(**changes))
    assert estimate_memory(SMALL, SMALL_STEP.replace(lora_rank=64)).items["weights"] > 0


# ------------------------------------------------------------- context and expert parallelism
# llama-7b, bf16 mixed precision, AdamW, fused attention: per token and layer, by hand,
# norms 2 x (4 + 2) x 4096 (an fp32 copy and the bf16 result), attention input 2 x 4096,
# q, k, v 3 x 2 x 4096, attention output 2 x 4096, MLP input 2 x 4096, SwiGLU 4 x 2 x 11,008.
LLAMA_7B_BYTES_PER_TOKEN_LAYER = 49_152 + 8_192 + 24_576 + 8_192 + 8_192 + 88_064
LLAMA_7B_PARAMETERS = 6_738_415_616


def test_context_parallel_keeps_a_quarter_of_the_sequence_and_shards_zero_over_its_gpus():
    """8 GPUs: context parallel 4 x data parallel 2, ZeRO-1, 4096-token sequences."""
    setup = TrainingSetup(seq=4096, gpus=8, context_parallel=4, zero=1)
    estimate = estimate_memory("llama-7b", setup)
    tokens = 4096 // 4  # this GPU's share of the sequence
    assert estimate.items["block activations"] == 32 * tokens * LLAMA_7B_BYTES_PER_TOKEN_LAYER
    # The final norm (fp32 copy + bf16 result), the head's input, fp32 log-probabilities.
    assert estimate.items["head activations"] == tokens * (6 * 4096 + 2 * 4096 + 4 * 32000)
    # ZeRO-1 shards AdamW's two fp32 states over all 8 GPUs that hold the weights, the
    # context-parallel ones included (over the 2 data-parallel ones alone would be 4x this).
    assert estimate.items["optimizer states"] == 8 * LLAMA_7B_PARAMETERS / 8
    assert setup.data_parallel == 2 and setup.weight_replicas == 8
    whole = estimate_memory("llama-7b", setup.replace(context_parallel=1))
    assert whole.items["block activations"] == 4 * estimate.items["block activations"]


# Mixtral 8x7B: 45,097,156,608 parameters in experts, 1,605,636,096 others.
MIXTRAL_EXPERTS, MIXTRAL_OTHERS = 45_097_156_608, 1_605_636_096


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_expert_parallel_gives_each_gpu_its_share_of_the_experts(ep):
    estimate = estimate_memory("mixtral-8x7b", seq=4096, gpus=8, expert_parallel=ep)
    held = MIXTRAL_OTHERS + MIXTRAL_EXPERTS / ep
    assert estimate.items["weights"] == 2 * held  # bf16
    assert estimate.items["master weights"] == 4 * held
    assert estimate.items["optimizer states"] == 8 * held
    # ZeRO-1 shards every state over the 8 GPUs, whatever share of the experts each holds.
    sharded = estimate_memory("mixtral-8x7b", seq=4096, gpus=8, expert_parallel=ep, zero=1)
    assert sharded.items["optimizer states"] == 8 * (MIXTRAL_OTHERS + MIXTRAL_EXPERTS) / 8
    assert sharded.items["weights"] == 2 * held


def test_moe_activations_count_the_router_and_each_token_s_top_k_experts():
    """Per token and layer, by hand (bf16): norms 12 x 4096, attention input 2 x 4096, q, k, v
    2 x (4096 + 2 x 1024), attention output and MLP input 2 x 4096 each, the router's fp32
    probabilities 4 x 8, and for each of the top 2 experts the token's copy (2 x 4096), SwiGLU's
    four tensors (4 x 2 x 14,336) and the expert's output (2 x 4096)."""
    per_token = (49_152 + 8_192 + 12_288 + 8_192 + 8_192 + 32
                 + 2 * (8_192 + 114_688 + 8_192))
    estimate = estimate_memory("mixtral-8x7b", seq=4096)
    assert estimate.items["block activations"] == 32 * 4096 * per_token


@pytest.mark.parametrize(
    "model, changes, words",
    [
        ("llama-7b", {"seq": 4000, "gpus": 3, "context_parallel": 3},
         "does not divide the 4000-token sequence"),
        ("llama-7b", {"gpus": 2, "context_parallel": 2, "attention": "eager"},
         "use attention='sdpa'"),
        ("llama-7b", {"gpus": 2, "context_parallel": 2, "scored_tokens": 64},
         "leave context_parallel at 1"),
        ("llama-7b", {"gpus": 2, "expert_parallel": 2}, "needs a mixture of experts"),
        ("mixtral-8x7b", {"gpus": 16, "expert_parallel": 16}, "does not divide the model's 8"),
        ("mixtral-8x7b", {"lora_rank": 16}, "lora_rank is planned for dense models only"),
        ("mixtral-8x7b", {"optimizer": "muon"}, "Muon is planned for dense models only"),
    ],
)
def test_setups_a_model_cannot_take_are_refused(model, changes, words):
    with pytest.raises(ValueError, match=words):
        estimate_memory(model, TrainingSetup(**changes))
    assert words.split("'")[0] in memory.model_setup_problem(model, TrainingSetup(**changes))


def test_the_out_of_memory_advice_offers_a_mixture_of_experts_no_lora():
    options = memory.memory_options("mixtral-8x7b", TrainingSetup(seq=4096, gpus=8,
                                                                   expert_parallel=8), 80 * GB)
    assert options and not any("LoRA" in option.change for option in options)
