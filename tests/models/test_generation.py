"""generate_continuation is Hugging Face's `generate` seeded just before it draws, in eval mode,
with the prompt's ids handed back apart from the new ones; generate_batch gives prompts of one
length exactly the ids each gives alone. Mistakes caught: seeding before something else draws
(the text would depend on it), leaving the model in eval mode, the prompt left in the
continuation; a batched row that keeps what generate filled in after it stopped (pad ids, beam
search's -1, further greedy tokens), a sampled or padded batch; and a place outside this module
that calls `generate` itself."""

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


def test_a_batch_refuses_sampling_and_prompts_of_other_lengths():
    tokenizer = code_tokenizer()
    model = generating_model(tokenizer)
    with pytest.raises(ValueError, match="decodes deterministically: sample with generate_cont"):
        generate_batch(model, tokenizer, SAME_LENGTH, max_new_tokens=4, do_sample=True)
    model.generation_config.do_sample = True  # options that say nothing take the model's default
    with pytest.raises(ValueError, match="deterministically"):
        generate_batch(model, tokenizer, SAME_LENGTH, max_new_tokens=4, num_beams=2)
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
