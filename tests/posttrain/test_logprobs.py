"""A completion's log-probability: per token and per sequence, the same numbers TRL's fused LM
head gives on the same tiny GPT-2. Mistakes caught: the prompt (or the padding) scored, the
logits read against the token at their own position instead of the next, the softmax taken
without its log-normaliser."""

import torch
from helpers.trl_trainers import VOCAB, tiny_model, trl_sequence_logprobs

from llmlab.memory import MemoryTracker
from llmlab.models import build_model, preset
from llmlab.posttrain import completion_logprobs, completion_mask, token_logprobs
from llmlab.train.finetune import IGNORE


def right_padded(rows: int = 6, width: int = 14, seed: int = 0):
    """(ids, labels, attention mask, completion mask): prompts and completions of several
    lengths, padded on the right; the labels are the completion's ids, IGNORE elsewhere."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (rows, width), generator=generator)
    attention = torch.zeros(rows, width, dtype=torch.long)
    completion = torch.zeros(rows, width, dtype=torch.long)
    for row in range(rows):
        prompt = 2 + row % 4
        end = width - row % 3 * 2  # some rows end in padding
        attention[row, :end] = 1
        completion[row, prompt:end] = 1
    return ids, ids.masked_fill(completion == 0, IGNORE), attention, completion


def by_hand(model, ids, labels):
    """log_softmax of the logits at t, read at the label of t + 1, summed where there is one."""
    with torch.no_grad():
        logp = model(input_ids=ids).logits.log_softmax(-1)[:, :-1]
    targets = labels[:, 1:]
    picked = logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return (picked * (targets != IGNORE)).sum(-1)


def test_completion_logprobs_are_trls_per_sequence_log_probabilities():
    model = tiny_model(seed=0)
    ids, labels, attention, completion = right_padded()
    inputs = {"input_ids": ids, "attention_mask": attention, "completion_mask": completion}
    with torch.no_grad():
        ours = completion_logprobs(model, ids, labels, attention)
        theirs = trl_sequence_logprobs(model, inputs)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    torch.testing.assert_close(ours, by_hand(model, ids, labels), rtol=0, atol=1e-5)


def test_token_logprobs_are_trls_fused_head_with_prompts_padded_on_the_left():
    model = tiny_model(seed=1)
    ids, labels, attention, _ = right_padded(seed=1)
    attention[:, :2] = 0  # padding before the prompt: only the attention mask hides it
    labels[:, :2] = IGNORE
    with torch.no_grad():
        ours = token_logprobs(model, ids, labels, attention)
        theirs = model(input_ids=ids, attention_mask=attention, labels=labels,
                       fused_lm_head=True).log_probs
    assert ours.shape == (len(ids), ids.shape[1] - 1)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_only_the_completion_is_scored_and_the_padding_is_never_read():
    model = tiny_model(seed=2)
    ids, labels, attention, _ = right_padded(seed=2)
    scores = token_logprobs(model, ids, labels).detach()
    mask = completion_mask(labels)
    assert mask.dtype == scores.dtype and mask.shape == scores.shape
    assert torch.equal(scores != 0, mask == 1)  # below 0 exactly where a completion token is
    other_padding = ids.masked_fill(attention == 0, VOCAB - 1)
    with torch.no_grad():
        again = completion_logprobs(model, other_padding, labels)
    torch.testing.assert_close(again, scores.sum(-1), rtol=0, atol=1e-6)


def test_scoring_keeps_no_key_value_cache_whatever_the_config_asks():
    """A fresh transformers config asks for a cache; a forward with gradients that kept one
    would hold every layer's keys and values a second time (Lab 02's tracker sees them)."""
    model = build_model(preset("tiny", vocab_size=VOCAB, n_layer=2, d_model=64, n_head=2))
    ids, labels, _, _ = right_padded()
    kept = {}
    for use_cache in (True, False):
        model.config.use_cache = use_cache
        with MemoryTracker(model) as tracker:
            scores = token_logprobs(model, ids, labels)
            kept[use_cache] = tracker.current["activations"]
        del scores
    assert kept[True] == kept[False]


def test_the_head_sees_only_the_positions_that_predict_a_completion_token():
    # Prompts of 8 and 9 tokens, completions to the end of 12: the logits at positions 7 to 11
    # (the one before the first completion token, through the last) are all that is needed.
    model = tiny_model(seed=3)
    ids, labels, _, _ = right_padded(rows=2, width=12, seed=3)
    labels[0, :8], labels[1, :9] = IGNORE, IGNORE
    widths = []
    model.lm_head.register_forward_hook(lambda module, args, out: widths.append(args[0].shape[1]))
    with torch.no_grad():
        scores = token_logprobs(model, ids, labels)
    assert widths == [5]
    torch.testing.assert_close(scores.sum(-1), by_hand(model, ids, labels), rtol=0, atol=1e-5)
    assert torch.equal(scores != 0, completion_mask(labels) == 1)
