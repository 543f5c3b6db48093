"""Multiple choice scored by log-likelihood, as evaluation harnesses (lm-eval-harness) do.

The model never writes an answer. For each choice it is asked how likely that choice is as the
continuation of the prompt: the sum of log p(token | everything before it) over the choice's
tokens only. The most likely choice is the model's answer. This needs no generation and no
parsing, works for a model that cannot follow instructions, and is deterministic.

Two details decide whether the numbers match a harness's:
- The prompt and the choice are tokenized together and the choice's tokens are what comes after
  the prompt's: a choice tokenized on its own can start with a different token.
- A prompt and choice longer than the model's context lose the prompt's first tokens.
- Longer choices collect more negative log-probabilities. `normalize="characters"` divides by
  the choice's length in characters (the harness's `acc_norm`); "tokens" by its token count.

Accuracy on a few hundred questions is uncertain by several points, so it comes with an
interval: Wilson's score interval, which stays inside [0, 1] and behaves at 0% and 100%.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from llmlab.models.eval_mode import eval_mode

NORMALIZATIONS = ("none", "tokens", "characters")
# (prompt, choice) pairs per forward pass: enough to fill a CPU's matmuls, few enough for any GPU
ROWS = 64


@dataclass(frozen=True)
class Question:
    prompt: str
    choices: tuple[str, ...]
    answer: int  # index of the right choice


@dataclass(frozen=True)
class ChoiceResult:
    accuracy: float
    low: float  # Wilson interval
    high: float
    correct: int
    total: int
    predictions: tuple[int, ...]  # the chosen index per question
    scores: tuple[tuple[float, ...], ...]  # per question, per choice (after normalization)


def wilson_interval(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval for a proportion (z=1.96: 95%)."""
    if total < 1 or not 0 <= successes <= total:
        raise ValueError(f"need 0 <= successes <= total and total >= 1, got {successes}/{total}")
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z / (1 + z * z / total) * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return max(0.0, centre - half), min(1.0, centre + half)


def split_tokens(
    encode: Callable[[str], list[int]], prompt: str, continuation: str
) -> tuple[list[int], list[int]]:
    """(prompt ids, continuation ids): tokenized together, split after the prompt's tokens. A
    space that ends the prompt moves to the continuation (" Paris", not "Paris"), as harnesses do.
    Where a token spans the boundary (the joint ids do not start with the prompt's), the
    continuation is tokenized on its own: the only split that keeps the prompt's ids."""
    stripped = prompt.rstrip()
    continuation = prompt[len(stripped) :] + continuation
    context = list(encode(stripped))
    whole = list(encode(stripped + continuation))
    if whole[: len(context)] != context:
        return context, list(encode(continuation))
    return context, whole[len(context) :]


def continuation_logprob(
    model: torch.nn.Module, context: Sequence[int], continuation: Sequence[int]
) -> float:
    """Sum of log p(continuation token | all tokens before it), over the continuation only.

    Longer than the model's context, the context is cut from the left, as lm-eval-harness does:
    the continuation is scored on the nearest tokens before it."""
    return continuation_logprobs(model, [(context, continuation)])[0]


@torch.no_grad()
def continuation_logprobs(
    model: torch.nn.Module, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]
) -> list[float]:
    """`continuation_logprob` of every (context, continuation) pair, in one forward pass: the
    rows are padded on the right, where a causal model's earlier positions never look."""
    # transformers' name for every model's context; a model without one (an LSTM) has no limit
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    rows = []
    for context, continuation in pairs:
        if not context or not continuation:
            raise ValueError(
                "need at least one context token (start the prompt with a BOS token if it is "
                f"empty) and one continuation token; got {len(context)} and {len(continuation)}"
            )
        if limit and len(continuation) > limit:
            raise ValueError(f"a continuation of {len(continuation)} tokens is longer than the "
                             f"model's context ({limit}): no prompt token would be left to score "
                             "it from; shorten the choice")
        ids = [*context, *continuation][:-1]  # the last token is only predicted, never read
        rows.append(ids[-limit:] if limit else ids)
    device = next(model.parameters()).device
    width = max(len(row) for row in rows)
    batch = torch.tensor([row + [0] * (width - len(row)) for row in rows], device=device)
    log_probs = model(batch).logits.float().log_softmax(-1)
    scores = []
    for row, (_, continuation), predicted in zip(rows, pairs, log_probs, strict=True):
        # The logits at position t predict token t + 1: the continuation's are the row's last.
        predicted = predicted[len(row) - len(continuation) : len(row)]
        targets = torch.tensor(continuation, device=device)
        scores.append(predicted.gather(1, targets[:, None]).sum().item())
    return scores


def multiple_choice(
    model: torch.nn.Module,
    encode: Callable[[str], list[int]],
    questions: Sequence[Question],
    normalize: str = "none",
    z: float = 1.96,
) -> ChoiceResult:
    """Accuracy of `model` on the questions, each answered by its most likely choice, with a
    Wilson interval; `encode` turns text into token ids (a tokenizer's `encode`)."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"unknown normalize={normalize!r}: use one of {NORMALIZATIONS}")
    if not questions:
        raise ValueError("no questions to score")
    for number, question in enumerate(questions):
        if not 0 <= question.answer < len(question.choices):
            raise ValueError(f"question {number}: answer {question.answer} is not a choice")
    pairs = [split_tokens(encode, question.prompt, choice)
             for question in questions for choice in question.choices]
    with eval_mode(model):  # no dropout: the same model must give the same answers every time
        logprobs = [score for start in range(0, len(pairs), ROWS)
                    for score in continuation_logprobs(model, pairs[start : start + ROWS])]
    scored = iter(zip(pairs, logprobs, strict=True))  # in the order of the questions' choices
    predictions, all_scores = [], []
    for question in questions:
        scores = []
        for choice in question.choices:
            (_, continuation), logprob = next(scored)
            length = {"none": 1, "tokens": len(continuation), "characters": len(choice)}
            scores.append(logprob / length[normalize])
        predictions.append(max(range(len(scores)), key=scores.__getitem__))
        all_scores.append(tuple(scores))
    correct = sum(p == q.answer for p, q in zip(predictions, questions, strict=True))
    low, high = wilson_interval(correct, len(questions), z)
    return ChoiceResult(correct / len(questions), low, high, correct, len(questions),
                        tuple(predictions), tuple(all_scores))
