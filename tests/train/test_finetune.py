"""Task fine-tuning: only the target's tokens are scored, each method trains exactly its part,
the original model is left alone, and the memory of a step sits beside Lab 02's plan.
Mistakes caught: the prompt (or the padding) counted in the loss, labels shifted twice or not at
all, a tied head trained together with the input embedding, LoRA leaving the base trainable."""

import math

import pytest
import torch
import torch.nn.functional as F

from llmlab.memory import TrainingSetup
from llmlab.models import build_model, preset
from llmlab.train.finetune import (
    IGNORE,
    encode_example,
    finetune,
    finetune_copy,
    finetune_memory,
    finetune_rate,
    lora_targets,
    target_loss,
    task_batch,
    task_batches,
    trainable_parameters,
)
from llmlab.train.lora import LoRALinear


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(preset("tiny", vocab_size=64, context=32, n_layer=2, d_model=32, n_head=2))


def encode(text):
    return [ord(c) % 64 for c in text]


def test_labels_hold_the_target_only_and_padding_is_ignored():
    long = encode_example(encode, "abcd", "xyz")
    short = encode_example(encode, "ab", "q")
    ids, labels = task_batch([long, short], pad_id=0)
    assert ids.tolist() == [encode("abcdxyz"), encode("abq") + [0] * 4]
    assert labels.tolist() == [[IGNORE] * 4 + encode("xyz"), [IGNORE] * 2 + encode("q")
                               + [IGNORE] * 4]


def test_the_target_is_cut_and_empty_parts_are_refused():
    assert len(encode_example(encode, "ab", "x" * 50, max_target_tokens=5).ids) == 7
    with pytest.raises(ValueError, match="empty prompt or target"):
        encode_example(encode, "", "x")


def test_target_loss_scores_each_target_token_from_the_tokens_before_it(model):
    example = encode_example(encode, "def f", " ok")
    ids, labels = task_batch([example])
    logits = model(input_ids=ids).logits[0]
    # The target's tokens are positions 5..7; each is predicted from the logits one before.
    expected = F.cross_entropy(logits[4:7], ids[0, 5:8])
    assert target_loss(model, ids, labels).item() == pytest.approx(expected.item(), rel=1e-5)
    whole = F.cross_entropy(logits[:-1], ids[0, 1:])  # the mistake: the prompt scored too
    assert not math.isclose(whole.item(), expected.item(), rel_tol=1e-3)


def test_batches_cover_every_example_once_per_pass():
    examples = [encode_example(encode, f"p{i}", f"t{i}") for i in range(6)]
    batches = task_batches(examples, batch_size=3, seed=1)
    seen = [tuple(row.tolist()) for _ in range(2) for row in next(batches)[0]]
    assert sorted(seen) == sorted(tuple(e.ids) for e in examples)


def test_each_part_trains_what_it_names_and_leaves_the_original_alone(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    full = finetune_copy(model, "full")
    assert trainable_parameters(full) == sum(p.numel() for p in model.parameters())
    lora = finetune_copy(model, "lora", rank=4)
    wrapped = [m for m in lora.modules() if isinstance(m, LoRALinear)]
    assert len(wrapped) == len(lora_targets(model)) == 2 * 4  # 4 matrices per GPT-2 block
    assert trainable_parameters(lora) == sum(4 * (m.lora_A.in_features + m.lora_B.out_features)
                                             for m in wrapped)
    head = finetune_copy(model, "head")
    assert head.get_output_embeddings().weight is not head.get_input_embeddings().weight
    assert trainable_parameters(head) == head.get_output_embeddings().weight.numel()
    assert not head.get_input_embeddings().weight.requires_grad
    examples = [encode_example(encode, f"def f{i}", f" r{i}") for i in range(4)]
    finetune(head, task_batches(examples, 2), steps=2, lr=1e-2, progress=False)
    original = model.get_input_embeddings().weight
    assert torch.equal(head.get_input_embeddings().weight, original)  # the input side unchanged
    assert not torch.equal(head.get_output_embeddings().weight, original)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="unknown part 'qlora'"):
        finetune_copy(model, "qlora")


def test_finetune_lowers_the_loss_and_times_steps_with_the_clock_given(model):
    examples = [encode_example(encode, "def add(a, b):", " add two numbers")] * 4
    tuned = finetune_copy(model, "full")
    durations = [10, 1, 3, 2, 2, 5, 1, 2]  # the first step (Adam's state) is slow
    times = [t for i, d in enumerate(durations) for t in (100 * i, 100 * i + d)]
    ticks = iter(times)
    result = finetune(tuned, task_batches(examples, 2), steps=8, lr=3e-3, progress=False,
                      clock=lambda: next(ticks))
    assert result.losses[-1] < result.losses[0]
    assert result.seconds_per_step == 2  # the median of the steps after the first
    frozen = finetune_copy(model, "full").requires_grad_(False)
    with pytest.raises(ValueError, match="nothing to train"):
        finetune(frozen, task_batches(examples, 2), steps=1, lr=1e-3, progress=False)


@pytest.mark.parametrize("part", ["full", "lora", "head"])
def test_memory_of_a_step_sits_near_lab_02s_plan(part):
    setup = TrainingSetup(batch=2, seq=32, dtype="fp32", fused_optimizer=True, lora_rank=8)
    measured, planned = finetune_memory("tiny", setup, part)
    assert measured.peak_bytes / planned.peak == pytest.approx(1.0, abs=0.12)


def test_memory_of_the_head_alone_is_planned_as_head_only_and_is_the_smallest():
    setup = TrainingSetup(batch=2, seq=32, dtype="fp32", lora_rank=8)
    head, plan = finetune_memory("tiny", setup, "head")
    full, full_plan = finetune_memory("tiny", setup, "full")
    assert plan.setup.head_only and not plan.setup.lora_rank
    assert head.peak_bytes / plan.peak == pytest.approx(1.0, abs=0.01)  # measured 1.0000
    assert head.peak_bytes < full.peak_bytes and plan.peak < full_plan.peak
    with pytest.raises(ValueError, match="lora_rank"):
        finetune_memory("tiny", setup.replace(lora_rank=0), "lora")


def test_the_rate_warms_up_holds_and_decays_over_the_last_quarter():
    rates = [finetune_rate(step, 20, 1.0, warmup_steps=4) for step in range(20)]
    assert rates[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])  # warm-up
    assert rates[5:15] == [1.0] * 10  # held
    assert rates[15:] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2])  # the last 5 of 20 decay
    assert min(rates) > 0  # every step trains
    assert [finetune_rate(s, 4, 2e-3, decay_fraction=0) for s in range(4)] == [2e-3] * 4


@pytest.mark.parametrize(("step", "steps", "decay", "match"), [
    (5, 5, 0.25, "outside"), (-1, 5, 0.25, "outside"), (0, 5, 1.5, "between 0 and 1"),
])
def test_the_rate_refuses_steps_and_fractions_out_of_range(step, steps, decay, match):
    with pytest.raises(ValueError, match=match):
        finetune_rate(step, steps, 1e-3, decay_fraction=decay)
