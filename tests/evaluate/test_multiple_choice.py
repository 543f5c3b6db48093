"""Log-likelihood multiple choice: the continuation's log-probability equals one computed token by
token from prefixes, answers follow the scores, and the interval is Wilson's. Mistakes caught:
logits read one position late (each token scored by the logits that saw it), the prompt's tokens
counted in the sum, a mean where the harness sums, the choice tokenized apart from the prompt,
a padded batch read at its padded end, and a normal-approximation interval that leaves [0, 1]."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from llmlab.evaluate.multiple_choice import (
    Question,
    continuation_logprob,
    continuation_logprobs,
    multiple_choice,
    split_tokens,
    wilson_interval,
)
from llmlab.models import build_model, preset

VOCAB = 64


def encode(text):
    return [ord(c) % VOCAB for c in text]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(preset("tiny", vocab_size=VOCAB, context=64, n_layer=1, d_model=32,
                              n_head=2))


def reference_logprob(model, context, continuation):
    """Token by token: run the prefix, read the log-probability of the next token at its end."""
    total = 0.0
    with torch.no_grad():
        for i, token in enumerate(continuation):
            prefix = torch.tensor([*context, *continuation[:i]])[None]
            total += model(prefix).logits[0, -1].log_softmax(-1)[token].item()
    return total


def late_by_one(model, context, continuation):
    ids = torch.tensor([*context, *continuation])[None]
    log_probs = model(ids).logits[0].log_softmax(-1)[len(context) :]
    return log_probs.gather(1, torch.tensor(continuation)[:, None]).sum().item()


def with_prompt(model, context, continuation):
    ids = [*context, *continuation]
    return continuation_logprob(model, ids[:1], ids[1:])


def mean_not_sum(model, context, continuation):
    return continuation_logprob(model, context, continuation) / len(continuation)


def test_continuation_logprob_matches_token_by_token(model):
    generator = torch.Generator().manual_seed(1)
    cases = [(torch.randint(0, VOCAB, (a,), generator=generator).tolist(),
              torch.randint(0, VOCAB, (b,), generator=generator).tolist())
             for a, b in [(1, 1), (3, 4), (7, 2), (5, 9)]]
    for context, continuation in cases:
        expected = reference_logprob(model, context, continuation)
        found = continuation_logprob(model, context, continuation)
        assert found == pytest.approx(expected, abs=1e-4)
    context, continuation = cases[1]
    expected = reference_logprob(model, context, continuation)
    for mistake in (late_by_one, with_prompt, mean_not_sum):
        with torch.no_grad():
            assert mistake(model, context, continuation) != pytest.approx(expected, abs=1e-3)


def test_a_prompt_longer_than_the_context_is_cut_from_the_left(model):
    """As lm-eval-harness: the continuation is scored on the last tokens that fit (the model's
    context is 64 here). Without the cut, the position embeddings run out (IndexError)."""
    generator = torch.Generator().manual_seed(2)
    context = torch.randint(0, VOCAB, (100,), generator=generator).tolist()
    continuation = torch.randint(0, VOCAB, (5,), generator=generator).tolist()
    # 64 tokens go in: the last 60 of the context and the first 4 of the continuation
    expected = reference_logprob(model, context[-60:], continuation)
    assert continuation_logprob(model, context, continuation) == pytest.approx(expected, abs=1e-4)
    # cutting one token too many (forgetting that the last token is never read) scores another
    assert reference_logprob(model, context[-59:], continuation) != pytest.approx(expected,
                                                                                  abs=1e-3)
    with pytest.raises(ValueError, match="longer than the model's context"):
        continuation_logprob(model, context, context[:65])


def read_at_the_padded_end(model, pairs):
    """The batch's mistake: each row's continuation read from the end of the widest row."""
    rows = [[*context, *continuation][:-1] for context, continuation in pairs]
    width = max(len(row) for row in rows)
    with torch.no_grad():
        log_probs = model(torch.tensor([row + [0] * (width - len(row)) for row in rows])).logits
    return [log_probs[i, -len(c):].log_softmax(-1).gather(1, torch.tensor(c)[:, None]).sum().item()
            for i, (_, c) in enumerate(pairs)]


def test_a_batch_scores_every_pair_as_it_scores_alone(model):
    """Pairs of different lengths (one longer than the context) in one padded forward pass."""
    generator = torch.Generator().manual_seed(3)
    pairs = [(torch.randint(0, VOCAB, (a,), generator=generator).tolist(),
              torch.randint(0, VOCAB, (b,), generator=generator).tolist())
             for a, b in [(2, 3), (9, 1), (100, 4), (5, 6)]]
    alone = [continuation_logprob(model, context, continuation) for context, continuation in pairs]
    assert alone[0] == pytest.approx(reference_logprob(model, *pairs[0]), abs=1e-4)
    assert continuation_logprobs(model, pairs) == pytest.approx(alone, abs=1e-4)
    short = pairs[:2] + pairs[3:]  # the mistake needs rows that fit without a cut
    assert read_at_the_padded_end(model, short) != pytest.approx(alone[:2] + alone[3:], abs=1e-3)
    with pytest.raises(ValueError, match="context token"):
        continuation_logprobs(model, [pairs[0], ([], [1])])


def test_the_choice_is_tokenized_with_the_prompt():
    words = {"ab": 1, "a": 2, "b": 3, " ": 4, "c": 5}

    def greedy(text):  # a tokenizer that merges across the prompt/choice boundary
        ids, i = [], 0
        while i < len(text):
            piece = text[i : i + 2] if text[i : i + 2] in words else text[i]
            ids.append(words[piece])
            i += len(piece)
        return ids

    assert split_tokens(greedy, "c ", "b") == ([5], [4, 3])  # the space moves over
    assert (greedy("c "), greedy("b")) == ([5, 4], [3])  # the mistake: tokenized apart
    assert split_tokens(greedy, "c a ", "bc") == ([5, 4, 2], [4, 3, 5])
    assert greedy("cab") == [5, 1]  # "ab" spans the boundary of "ca" + "b"...
    assert split_tokens(greedy, "ca", "b") == ([5, 2], [3])  # ...so "b" is tokenized alone


class TableModel(nn.Module):
    """A bigram model: the next token's logits are a row of a fixed table."""

    def __init__(self, table):
        super().__init__()
        self.table = nn.Parameter(table)

    def forward(self, ids):
        return SimpleNamespace(logits=self.table[ids])


def test_answers_follow_the_scores_and_normalization():
    table = torch.full((VOCAB, VOCAB), -5.0)
    x, y, z = encode("x")[0], encode("y")[0], encode("z")[0]
    table[x, y] = 5.0  # after x, y is likely
    table[x, z] = 3.0  # z less so
    table[y, y] = -2.0  # after y, y again is possible
    model = TableModel(table)
    questions = [Question("x", ("y", "z"), 0), Question("x", ("z", "y"), 1),
                 Question("x", ("yyyy", "z"), 0)]
    summed = multiple_choice(model, encode, questions)
    assert summed.predictions == (0, 1, 1)  # the long right answer loses on the sum...
    per_char = multiple_choice(model, encode, questions, normalize="characters")
    assert per_char.predictions == (0, 1, 0)  # ...and wins per character
    assert per_char.correct == 3 and per_char.accuracy == 1.0
    assert (summed.low, summed.high) == pytest.approx(wilson_interval(2, 3))
    assert model.training  # left as it was found
    with pytest.raises(ValueError, match="answer 2 is not a choice"):
        multiple_choice(model, encode, [Question("x", ("y", "z"), 2)])
    with pytest.raises(ValueError, match="context token"):
        multiple_choice(model, encode, [Question(" ", ("y", "z"), 0)])


def normal_interval(successes, total, z=1.96):
    p = successes / total
    half = z * math.sqrt(p * (1 - p) / total)
    return p - half, p + half


def test_wilson_interval_known_values_and_the_normal_mistake():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert normal_interval(0, 10) == (0, 0)  # the mistake: no uncertainty at 0 of 10
    assert normal_interval(9, 10)[1] > 1  # and past 100%
    with pytest.raises(ValueError, match="11/10"):
        wilson_interval(11, 10)
