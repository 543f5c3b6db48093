"""generate_continuation is Hugging Face's `generate` seeded just before it draws, in eval mode,
with the prompt's ids handed back apart from the new ones; generate_batch gives prompts of one
length exactly the ids each gives alone, sampled with its own seed too. Mistakes caught: seeding
before something else draws (the text would depend on it), leaving the model in eval mode, the
prompt left in the continuation; a batched row that keeps what generate filled in after it
stopped (pad ids, beam search's -1, further greedy tokens), a padded batch, a sampled batch
without a seed per prompt, one generator for the whole batch, a warper dropped, applied out of
transformers' order or without its defaults, an option it cannot apply row by row taken
silently; and a place outside this module that calls `generate` itself."""

import pytest
import torch
from helpers.definitions import PACKAGE, calls
from helpers.evaluation import code_tokenizer, generating_model

from llmlab.models import generate_batch, generate_continuation

SAME_LENGTH = ["def add", "# Add", "return", "+ b", "(a"]  # two tokens each


def test_it_is_generate_seeded_just_before_it_draws():
    tokenizer = code_tokenizer()
    model = generating_model(tokenizer)
    ids = tokenizer("def add", return_tensors="pt").input_ids
    torch.manual_seed(7)
    with torch.no_grad():
        expected = model.eval().generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=True, top_k=0,
            pad_token_id=tokenizer.pad_token_id,
        )
    model.train()
    torch.rand(3)  # whatever drew before does not matter: the seed comes just before generate
    prompt, new = generate_continuation(
        model, tokenizer, "def add", seed=7, max_new_tokens=6, do_sample=True, top_k=0
    )
    assert torch.equal(prompt, ids[0]) and torch.equal(new, expected[0, ids.shape[1] :])
    assert model.training  # its mode came back


@pytest.mark.parametrize("options", [
    {"do_sample": False, "stop_strings": [" "]},
    {"stop_strings": ["a"]},  # no do_sample: the model's default, greedy
    {"do_sample": False, "eos_token_id": 275},
    {"do_sample": False, "num_beams": 4, "stop_strings": [" "]},
    {"num_beams": 3, "length_penalty": 0.5, "eos_token_id": 258, "stop_strings": ["\n"]},
])
def test_a_batch_gives_each_prompt_the_ids_it_gets_alone(options):
    tokenizer = code_tokenizer()
    model = generating_model(tokenizer)
    assert {len(tokenizer(prompt).input_ids) for prompt in SAME_LENGTH} == {2}
    alone = [generate_continuation(model, tokenizer, prompt, seed=0, max_new_tokens=12,
                                   **options)[1] for prompt in SAME_LENGTH]
    # Some prompts stop early and others run on: the batch fills the early ones, and they must
    # come back cut where they stopped alone.
    assert min(map(len, alone)) < 12 == max(map(len, alone))
    together = generate_batch(model, tokenizer, SAME_LENGTH, max_new_tokens=12, **options)
    assert [row.tolist() for row in together] == [row.tolist() for row in alone]


@pytest.mark.parametrize("options", [
    {"do_sample": True, "top_k": 0},
    {"do_sample": True},  # transformers' default top-k of 50 (this vocabulary has 512 tokens)
    {"do_sample": True, "temperature": 0.7, "top_k": 0, "stop_strings": [" "]},
    {"do_sample": True, "temperature": 3.0, "top_k": 20, "top_p": 0.5},  # the order matters
    {"do_sample": True, "temperature": 2.0, "top_k": 0, "min_p": 0.3, "eos_token_id": 275},
])
def test_a_sampled_batch_gives_each_prompt_what_its_own_seed_gives_it_alone(options):
    tokenizer = code_tokenizer()
    model = generating_model(tokenizer)
    with torch.no_grad():  # a few likely tokens and a long tail, where every warper changes draws
        model.transformer.ln_f.weight.mul_(4)
    seeds = [11, 3, 3, 40, 7]  # two prompts with one seed: still their own draws
    alone = [generate_continuation(model, tokenizer, prompt, seed=seed, max_new_tokens=12,
                                   **options)[1]
             for prompt, seed in zip(SAME_LENGTH, seeds, strict=True)]
    together = generate_batch(model, tokenizer, SAME_LENGTH, max_new_tokens=12, seeds=seeds,
                              **options)
    assert [row.tolist() for row in together] == [row.tolist() for row in alone]
    reseeded = generate_batch(model, tokenizer, SAME_LENGTH, max_new_tokens=12,
                              seeds=[seed + 1 for seed in seeds], **options)
    assert [row.tolist() for row in reseeded] != [row.tolist() for row in alone]


def test_a_batch_refuses_what_it_cannot_give_as_alone():
    tokenizer = code_tokenizer()
    model = generating_model(tokenizer)
    with pytest.raises(ValueError, match="needs one seed per prompt"):
        generate_batch(model, tokenizer, SAME_LENGTH, max_new_tokens=4, do_sample=True)
    model.generation_config.do_sample = True  # options that say nothing take the model's default
    with pytest.raises(ValueError, match="needs one seed per prompt"):
        generate_batch(model, tokenizer, SAME_LENGTH, max_new_tokens=4, seeds=[0, 1])
    with pytest.raises(ValueError, match=r"got \['num_beams'\]"):
        generate_batch(model, tokenizer, SAME_LENGTH, max_new_tokens=4, num_beams=2,
                       seeds=list(range(5)))
    with pytest.raises(ValueError, match=r"got \['typical_p'\]: sample such options one prompt"):
        generate_batch(model, tokenizer, SAME_LENGTH, max_new_tokens=4, typical_p=0.5,
                       seeds=list(range(5)))
    model.generation_config.typical_p = 0.5  # a checkpoint's own setting counts too
    with pytest.raises(ValueError, match=r"got \['typical_p'\]"):
        generate_batch(model, tokenizer, SAME_LENGTH, max_new_tokens=4, seeds=list(range(5)))
    model.generation_config.typical_p = None
    model.generation_config.do_sample = False
    with pytest.raises(ValueError, match=r"one length in tokens .* got lengths \[1, 2\]"):
        generate_batch(model, tokenizer, ["def", "def add"], max_new_tokens=4)


def test_only_this_module_calls_generate():
    """One generation module: completions, samples and the trainer's samples all call it."""
    assert calls(PACKAGE, {"generate"}, mentioning=r"\.generate\(") == [
        "llmlab/models/generation.py:generate_continuation",
        "llmlab/models/generation.py:generate_batch",
        "llmlab/models/generation.py:sample_batch",
    ]
