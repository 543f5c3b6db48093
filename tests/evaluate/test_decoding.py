"""Completions by strategy: greedy is the argmax loop, beam search with one beam is greedy,
sampling is reproducible and independent of the other prompts, and the text is cut at the stop;
every strategy decodes prompts of one length together and gives the text of one at a time.
Mistakes caught: the prompt left in the completion, the text not cut at the stop string, one
seed for the whole list (a prompt's sample then depends on the prompts before it), completions
handed back in the order of their batches, prompts of other lengths in one batch, batches over
the size limit, a batch's seeds not those of its prompts."""

import pytest
import torch
from helpers.evaluation import code_tokenizer, generating_model

from llmlab.evaluate import decoding
from llmlab.evaluate.decoding import STRATEGIES, complete
from llmlab.models import generate_continuation

# 1 to 7 tokens long, the lengths mixed up so that batches by length are not in prompt order.
MIXED = ["def add", "a, b", "def", "# Add", "    return a + b", "return a", "b", "+ b",
         "# Add two", "return", "(a", "def add(a, b):"]


@pytest.fixture(scope="module")
def tokenizer():
    return code_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return generating_model(tokenizer)


def argmax_loop(model, tokenizer, prompt, steps):
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    for _ in range(steps):
        with torch.no_grad():
            next_id = model(ids).logits[0, -1].argmax()
        ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
    return tokenizer.decode(ids[0, -steps:])


def test_greedy_is_the_argmax_loop_and_one_beam_is_greedy(model, tokenizer):
    prompts = ["def add(a, b):", "# Add"]
    greedy = complete(model, tokenizer, prompts, "greedy", max_new_tokens=6, stop=None)
    assert greedy == [argmax_loop(model, tokenizer, p, 6) for p in prompts]
    one_beam = complete(model, tokenizer, prompts, {"do_sample": False, "num_beams": 1},
                        max_new_tokens=6, stop=None)
    assert one_beam == greedy
    assert not any(text.startswith(p) for text, p in zip(greedy, prompts, strict=True))


def test_sampling_is_seeded_per_prompt(model, tokenizer):
    prompts = ["def", "# Add", "return"]
    together = complete(model, tokenizer, prompts, "sample-t1.0", max_new_tokens=8, seed=5)
    assert together == complete(model, tokenizer, prompts, "sample-t1.0", max_new_tokens=8, seed=5)
    alone = complete(model, tokenizer, prompts[1:2], "sample-t1.0", max_new_tokens=8, seed=6)
    assert alone == together[1:2]  # prompt 1 of seed 5 is prompt 0 of seed 6
    other_seed = complete(model, tokenizer, prompts, "sample-t1.0", max_new_tokens=8, seed=50)
    assert other_seed != together


def test_text_is_cut_at_the_stop(model, tokenizer):
    whole = complete(model, tokenizer, ["def add"], "sample-t1.0", max_new_tokens=30, stop=None,
                     seed=1)[0]
    stop = whole.strip()[len(whole.strip()) // 2]  # a character from the middle of the text
    cut = complete(model, tokenizer, ["def add"], "sample-t1.0", max_new_tokens=30, stop=stop,
                   seed=1)[0]
    assert cut == whole[: whole.index(stop)] and len(cut) < len(whole)


def test_generation_stops_at_the_stop(model, tokenizer):
    """The steps after the stop string are not computed (the text stays the same)."""
    calls = []
    hook = model.register_forward_hook(lambda *args: calls.append(1))
    try:
        whole = complete(model, tokenizer, ["def add"], "sample-t1.0", max_new_tokens=30,
                         stop=None, seed=1)[0]
        steps_whole = len(calls)
        # A letter from the second half (a lone byte of a character could not be matched).
        stop = next(c for c in whole[len(whole) // 2 :] if c.isascii() and c.isalnum())
        calls.clear()
        cut = complete(model, tokenizer, ["def add"], "sample-t1.0", max_new_tokens=30, stop=stop,
                       seed=1)[0]
    finally:
        hook.remove()
    assert cut == whole[: whole.index(stop)]
    assert len(calls) < steps_whole


def test_strategies_are_named(model, tokenizer):
    assert set(STRATEGIES) >= {"greedy", "beam-4", "sample-t0.7"}
    assert len(complete(model, tokenizer, ["def"], "beam-4", max_new_tokens=4)) == 1
    with pytest.raises(ValueError, match="unknown strategy 'nucleus'"):
        complete(model, tokenizer, ["def"], "nucleus")


@pytest.mark.parametrize("strategy", ["greedy", "beam-4", {"num_beams": 3}, "sample-t0.7",
                                      {"do_sample": True, "top_k": 5}])
@pytest.mark.parametrize("stop", ["\n", " ", None])
def test_every_strategy_in_batches_gives_the_text_of_one_at_a_time(
    model, tokenizer, monkeypatch, strategy, stop
):
    options = STRATEGIES[strategy] if isinstance(strategy, str) else strategy
    stopping = {"stop_strings": [stop]} if stop else {}
    expected = []
    for number, prompt in enumerate(MIXED):  # sampled, prompt i has seed 0 + i
        _, new = generate_continuation(model, tokenizer, prompt, seed=number, max_new_tokens=10,
                                       **options, **stopping)
        text = tokenizer.decode(new, skip_special_tokens=True)
        expected.append(text.split(stop)[0] if stop else text)
    batches = []

    def recorded(model, tokenizer, prompts, **kwargs):
        batches.append([len(tokenizer(prompt).input_ids) for prompt in prompts])
        return generate_batch(model, tokenizer, prompts, **kwargs)

    generate_batch = decoding.generate_batch
    monkeypatch.setattr(decoding, "generate_batch", recorded)
    monkeypatch.setattr(decoding, "BATCH", 2)  # so that a length's prompts take several batches
    assert complete(model, tokenizer, MIXED, strategy, max_new_tokens=10, stop=stop) == expected
    assert len(set(expected)) > len(MIXED) // 2  # the prompts' texts differ: order would show
    assert all(len(set(lengths)) == 1 and len(lengths) <= 2 for lengths in batches)
    assert sorted(n for lengths in batches for n in lengths) == sorted(
        len(tokenizer(prompt).input_ids) for prompt in MIXED)
    assert len(batches) < len(MIXED)  # batched, not one prompt a call
