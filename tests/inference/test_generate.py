"""Greedy generation with a KV cache picks the same tokens, from the same logits, as recomputing
the whole text each step (and as transformers' own greedy generate); step times come from the
clock it is given (no test here measures speed); bad requests are refused with what to do."""

import pytest
import torch
from helpers.train_fakes import VOCAB, tiny_gpt2

from llmlab.inference.generate import greedy_generate, time_generation
from llmlab.inference.kv_cache import KVCache


@pytest.fixture(scope="module")
def model():
    return tiny_gpt2(width=32, context=48).eval()


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))


def test_the_cache_generates_what_recomputation_generates(model, prompt):
    recomputed = greedy_generate(model, prompt, 20)
    cached = greedy_generate(model, prompt, 20, KVCache)
    assert torch.equal(cached.tokens, recomputed.tokens)
    torch.testing.assert_close(cached.logits, recomputed.logits, atol=1e-5, rtol=1e-5)


def test_greedy_generation_matches_transformers_generate(model, prompt):
    expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                              max_new_tokens=20, pad_token_id=0)
    assert torch.equal(greedy_generate(model, prompt, 20, KVCache).tokens, expected[:, 7:])


def test_each_step_is_timed_by_the_clock_given(model, prompt):
    ticks = iter(range(0, 100, 2))  # each reading 2 s after the previous one
    generated = greedy_generate(model, prompt, 3, KVCache, clock=lambda: next(ticks))
    assert generated.step_seconds == (2, 2, 2)
    assert generated.tokens.shape == (2, 3) and generated.logits.shape == (2, 3, VOCAB)


def test_timing_gives_a_rate_and_one_time_per_step(model, prompt):
    timing = time_generation(model, prompt, 5, KVCache, warmup=1, repeats=2)
    assert len(timing.step_seconds) == 5 and timing.tokens_per_second > 0


@pytest.mark.parametrize(("ids", "new_tokens", "match"), [
    (torch.zeros(7, dtype=torch.long), 3, r"shape \(batch, length >= 1\), got \(7,\).*ids\[None\]"),
    (torch.zeros(1, 0, dtype=torch.long), 3, r"got \(1, 0\)"),
    (torch.zeros(1, 7, dtype=torch.long), 0, "new_tokens must be at least 1, got 0"),
    (torch.zeros(1, 40, dtype=torch.long), 9, "40 tokens plus 9 new ones exceeds the model's "
                                               "context of 48"),
])
def test_bad_requests_are_refused_with_what_to_do(model, ids, new_tokens, match):
    with pytest.raises(ValueError, match=match):
        greedy_generate(model, ids, new_tokens)


def test_a_model_in_training_mode_or_not_gpt2_is_refused(model, prompt):
    model.train()
    try:
        with pytest.raises(ValueError, match=r"training mode.*model.eval\(\)"):
            greedy_generate(model, prompt, 2)
    finally:
        model.eval()
    with pytest.raises(ValueError, match="Linear is not a GPT-2 language model"):
        greedy_generate(torch.nn.Linear(2, 2), prompt, 2)
