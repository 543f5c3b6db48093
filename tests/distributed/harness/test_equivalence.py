"""The "same training as one process?" harness, in one process: the global batches it hands every
rank, the loss, the one-process reference run, the error it compares by, the bytes each
strategy's formula predicts, and the arguments it refuses before any rank starts. (The strategies
run through it on 2 ranks, and fail it without their communication:
tests/distributed/test_data_parallel.py.)"""

import dataclasses

import pytest
import torch

from llmlab.distributed.harness.equivalence import (
    SMOKE_SHAPE,
    EquivalenceResult,
    compare_to_single_process,
    formula_bytes,
    global_batches,
    loss_on,
    parameters_error,
    reference_parameters,
)
from llmlab.models import build_model, count_parameters, preset

SHAPE = preset("tiny", n_layer=1, vocab_size=64, context=8)


def test_global_batches_are_the_same_for_everyone_and_leave_the_global_rng_alone():
    state = torch.get_rng_state()
    batches = global_batches(3, 4, SHAPE)
    assert torch.equal(torch.get_rng_state(), state)
    assert batches.shape == (3, 4, SHAPE.context + 1)  # context inputs + the next token
    assert 0 <= batches.min() and batches.max() < SHAPE.vocab_size
    torch.manual_seed(123)  # another global seed, as another rank may have
    assert torch.equal(global_batches(3, 4, SHAPE), batches)
    assert not torch.equal(global_batches(3, 4, SHAPE, seed=1), batches)


def test_the_loss_is_the_mean_negative_log_likelihood_of_each_next_token():
    model = build_model(SHAPE, seed=0)
    tokens = global_batches(1, 3, SHAPE)[0]
    log_probs = model(tokens[:, :-1]).logits.log_softmax(-1)
    next_token = log_probs.gather(-1, tokens[:, 1:, None])  # position t predicts token t + 1
    assert loss_on(model, tokens).item() == pytest.approx(-next_token.mean().item(), rel=1e-6)


def test_the_reference_is_one_process_taking_a_step_on_each_batch_in_turn():
    batches = global_batches(2, 2, SHAPE)
    model = build_model(SHAPE, seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for tokens in batches:
        optimizer.zero_grad()
        loss_on(model, tokens).backward()
        optimizer.step()
    reference, seconds = reference_parameters(batches, SHAPE)
    assert reference.keys() == dict(model.named_parameters()).keys() and seconds > 0
    assert all(torch.equal(reference[name], p) for name, p in model.named_parameters())
    adamw = reference_parameters(batches, SHAPE, "adamw")[0]
    assert parameters_error(adamw, reference) > 1e-3


def test_the_error_is_the_largest_relative_error_of_any_parameter():
    reference = {"a": torch.ones(4), "b": torch.full((2, 2), 2.0)}
    assert parameters_error({k: v.clone() for k, v in reference.items()}, reference) == 0
    moved = {"a": torch.ones(4) * 1.001, "b": reference["b"] * 1.1}
    assert parameters_error(moved, reference) == pytest.approx(0.1)


def test_the_formula_bytes_count_a_tied_weight_once():
    model = build_model(SMOKE_SHAPE)  # GPT-2: the LM head is the embedding matrix
    params = count_parameters(SMOKE_SHAPE).total
    assert formula_bytes("ddp", model, 2) == params * 4  # a ring all-reduce: 2 (N-1)/N of it
    assert formula_bytes("zero1", model, 2) == formula_bytes("fsdp", model, 2) == params * 6


def test_a_run_passes_within_its_strategys_target():
    result = EquivalenceResult("ddp", 2, 5, max_rel_error=1e-6, step_seconds=1.0,
                               reference_step_seconds=1.0, bytes_sent_per_rank=0,
                               bytes_formula=0)
    assert result.passed and result.target == 1e-6
    assert not dataclasses.replace(result, max_rel_error=2e-6).passed
    assert dataclasses.replace(result, strategy="fsdp", max_rel_error=2e-6).passed  # 1e-5


@pytest.mark.parametrize("kwargs, message", [
    (dict(strategy="zero4"), "unknown strategy 'zero4': use one of ddp, zero1, fsdp"),
    (dict(strategy="fsdp", drop="broadcast"), "no .broadcast. to remove"),
    (dict(strategy="fsdp", comm_hook="fp16"), "comm hooks are DDP's"),
    (dict(strategy="ddp", optimizer="lion"), "unknown optimizer 'lion': use one of sgd-mom"),
    (dict(strategy="ddp", global_batch=3), "multiple of 2"),
], ids=["strategy", "drop", "comm hook", "optimizer", "uneven batch"])
def test_bad_arguments_are_refused_before_any_rank_starts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compare_to_single_process(**kwargs)
