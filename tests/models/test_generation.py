"""generate_continuation is Hugging Face's `generate` seeded just before it draws, in eval mode,
with the prompt's ids handed back apart from the new ones. Mistakes caught: seeding before
something else draws (the text would depend on it), leaving the model in eval mode, the prompt
left in the continuation; and a second place that calls `generate` itself."""

import torch
from helpers.definitions import PACKAGE, calls
from helpers.evaluation import code_tokenizer, generating_model

from llmlab.models import generate_continuation


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


def test_only_this_helper_calls_generate():
    """One generation helper: completions, samples and the trainer's samples all call it."""
    assert calls(PACKAGE, {"generate"}, mentioning=r"\.generate\(") == [
        "llmlab/models/generation.py:generate_continuation"
    ]
