"""The GRPO step's plan: each part on a hand-computed case, the KV cache against transformers' own,
Lab 02's plan reused for the update, which phase peaks, and bad input refused by name."""

import pytest
import torch
from helpers.tables import table_rows

from llmlab.memory import (
    GB,
    GRPO_PHASES,
    TrainingSetup,
    estimate_grpo_memory,
    estimate_memory,
    kv_cache_bytes,
)
from llmlab.models import ModelShape, build_model, count_parameters, preset

# Lab 03's smoke model: 4 layers, width 256, MLP 1024, vocabulary 2048. 8 prompts x 8 rollouts.
SMOKE_STEP = dict(rollouts=64, prompt_tokens=20, completion_tokens=12, dtype="fp32")
LLAMA_GQA = ModelShape("llama", 2, 128, 4, 512, 128, d_ff=344, n_kv_head=2)


def test_each_part_of_the_smoke_step_by_hand():
    plan = estimate_grpo_memory("tiny", **SMOKE_STEP)
    items = plan.items
    assert items["reference weights"] == count_parameters("tiny").total * 4 == items["weights"]
    assert items["prompt's KV cache"] == 2 * 4 * 64 * 20 * 256 * 4  # k and v, 4 layers
    assert items["KV cache"] == 2 * 4 * 64 * 31 * 256 * 4  # 20 + 12 - 1 tokens
    assert items["cache growth"] == 64 * 30 * 256 * 4  # one layer's keys one token shorter
    assert items["prompt's forward"] == 64 * 20 * (6 * 256 + 2 * 1024) * 4
    assert items["sampling buffers"] == 2 * 64 * 2048 * 4
    # Scoring: the forward through the blocks of all 64 rollouts' 32 tokens (one row of
    # position embeddings for the batch), then logits for the 12 completion tokens and the
    # position before them, and cross-entropy's two fp32 copies of the 12 shifted ones.
    assert items["scoring forward"] == 64 * 32 * (5 * 256 + 2 * 1024) * 4 + 32 * 256 * 4
    assert items["log-prob logits"] == 64 * 2048 * (13 * 4 + 2 * 12 * 4)
    # The update is Lab 02's training step on half the rollouts (2 updates), all 32 tokens long,
    # with logits for the same 13 positions.
    update = estimate_memory("tiny", TrainingSetup(batch=32, seq=32, dtype="fp32",
                                                   scored_tokens=13))
    assert plan.update == update
    assert plan.phase_peak("update") == update.peak + items["reference weights"]
    assert plan.phase_peak("scoring") == (
        items["weights"] + items["optimizer states"] + items["reference weights"]
        + max(items["scoring forward"], items["log-prob logits"]))


def test_the_kv_cache_is_the_size_of_transformers_own():
    """GPT-2 and a Llama with grouped-query attention (2 key/value heads for 4 query heads)."""
    for shape in (preset("tiny", n_layer=2, d_model=64, n_head=2), LLAMA_GQA):
        model = build_model(shape).eval()
        with torch.no_grad():
            cache = model(torch.zeros(3, 10, dtype=torch.long), use_cache=True).past_key_values
        held = sum(t.untyped_storage().nbytes() for layer in cache.layers
                   for t in (layer.keys, layer.values))
        assert held == kv_cache_bytes(shape, sequences=3, tokens=10, dtype="fp32")
    assert kv_cache_bytes(LLAMA_GQA, 1, 1, "bf16") == 2 * 2 * (2 * 32) * 2  # kv width 2 heads x 32


def test_which_phase_peaks_depends_on_the_shape():
    short = estimate_grpo_memory("tiny", **SMOKE_STEP)
    assert short.peak_phase == "update" and short.peak_moment.name == "start of backward"
    # Longer rollouts, more of them, small slices: scoring peaks, since the tiny model's logits
    # per token (2048 x 12 bytes) outweigh its cache per token (2 x 4 layers x 256 x 4 bytes).
    long = estimate_grpo_memory("tiny", rollouts=256, prompt_tokens=16, completion_tokens=240,
                                dtype="fp32", updates_per_rollout=32)
    assert long.peak_phase == "scoring"
    # A 7B model's cache per token (2 x 32 layers x 4096 x 2 bytes) outweighs its logits.
    seven = estimate_grpo_memory("llama-7b", rollouts=64, prompt_tokens=256,
                                 completion_tokens=1024, updates_per_rollout=16)
    assert seven.peak_phase == "generation" and seven.peak_moment.name == "end of sampling"
    assert seven.peak == max(seven.phase_peak(phase) for phase in GRPO_PHASES)
    # A long prompt and a short answer: generation is widest while it reads the prompt.
    prompt = estimate_grpo_memory("tiny", rollouts=64, prompt_tokens=240, completion_tokens=2,
                                  dtype="fp32")
    moment = max((m for m in prompt.moments if m.phase == "generation"), key=prompt.bytes_at)
    assert moment.name == "prompt's forward"


def test_the_cache_grows_with_rollouts_and_tokens_and_does_not_touch_the_states():
    one = estimate_grpo_memory("llama-7b", rollouts=8, prompt_tokens=64, completion_tokens=192)
    two = estimate_grpo_memory("llama-7b", rollouts=16, prompt_tokens=64, completion_tokens=192)
    assert two.items["KV cache"] == 2 * one.items["KV cache"]
    assert two.items["weights"] == one.items["weights"]
    assert one.items["KV cache"] / GB == pytest.approx(2 * 32 * 8 * 255 * 4096 * 2 / 1e9)


def test_the_reference_is_sharded_as_the_policy_under_zero_3():
    plan = estimate_grpo_memory("llama-7b", rollouts=8, prompt_tokens=64, completion_tokens=64,
                                gpus=8, zero=3)
    assert plan.items["reference weights"] == plan.items["weights"]
    assert plan.items["reference weights"] < estimate_grpo_memory(
        "llama-7b", rollouts=8, prompt_tokens=64, completion_tokens=64).items["weights"]


def test_the_table_sums_each_moment_and_marks_the_peak():
    plan = estimate_grpo_memory("tiny", **SMOKE_STEP)
    rows = table_rows(plan.table())
    allocated = next(row for row in rows if row["per GPU, GB"] == "allocated")
    peaks = [column for column in rows[0] if column.endswith("(peak)")]
    assert peaks == ["update: start of backward (peak)"]
    assert float(allocated[peaks[0]]) == pytest.approx(plan.peak / GB, abs=5e-4)
    assert {row["per GPU, GB"] for row in rows} >= set(plan.items)


@pytest.mark.parametrize("changes, words", [
    ({"rollouts": 0}, "rollouts must be a positive integer"),
    ({"completion_tokens": 2.5}, "completion_tokens must be a positive integer"),
    ({"rollouts": 63}, "do not split into 2 equal updates"),
    ({"prompt_tokens": 250}, "longer than the model's context 256"),
    ({"batch": 8}, "leave setup.batch and setup.seq"),
    ({"lora_rank": 8}, "adapters off"),
    ({"grad_accumulation": 2}, "updates_per_rollout, not grad_accumulation"),
    ({"gpus": 2, "tensor_parallel": 2}, "not tensor parallelism"),
    ({"dtype": "fp64"}, "unknown dtype"),
])
def test_bad_input_is_refused_with_a_clear_message(changes, words):
    with pytest.raises(ValueError, match=words):
        estimate_grpo_memory("tiny", **(SMOKE_STEP | changes))
    with pytest.raises(ValueError, match="unknown phase"):
        estimate_grpo_memory("tiny", **SMOKE_STEP).phase_peak("sampling")
