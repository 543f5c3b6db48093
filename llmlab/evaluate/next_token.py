"""The one perplexity of a mean loss, and next-token scores on held-out windows: perplexity
(token-weighted) and accuracy, one pass."""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from llmlab.models.eval_mode import eval_mode
from llmlab.models.finite import require_finite_parameters
from llmlab.models.loss import cross_entropy_on_ids


def perplexity_of(loss: float | None) -> float | None:
    """exp(loss), the perplexity of a mean cross-entropy in nats; inf where a float cannot hold
    it (the one perplexity every trainer, table and metric reports)."""
    if loss is None:
        return None
    try:
        return math.exp(loss)
    except OverflowError:  # a loss above 709.78, from a run that diverged
        return math.inf


@dataclass(frozen=True)
class TokenScores:
    """Sums over every predicted token of every window."""

    nll_sum: float  # summed cross-entropy in nats
    correct: int  # predictions whose most likely token was the right one
    tokens: int  # predicted tokens

    @property
    def loss(self) -> float:
        """Mean cross-entropy per token: each token weighs the same, whatever its window."""
        return self.nll_sum / self.tokens

    @property
    def perplexity(self) -> float:
        return perplexity_of(self.loss)

    @property
    def accuracy(self) -> float:
        return self.correct / self.tokens


@torch.no_grad()
def score_tokens(
    model: torch.nn.Module, windows: Sequence[torch.Tensor], batch_size: int = 8
) -> TokenScores:
    """Run `model` over the windows (1-D token ids, e.g. from `held_out_windows`); each window
    predicts its tokens 1.. from the ones before them."""
    if not windows:
        raise ValueError("no windows to score: pass at least one window of 2 or more tokens")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    device = next(model.parameters()).device
    nll_sum, correct, tokens = 0.0, 0, 0
    with eval_mode(model):  # no dropout: the same model must give the same score every time
        for batch in _same_length_batches(windows, batch_size):
            ids = batch.to(device)
            logits = model(ids).logits
            targets = ids[:, 1:]
            # Summed, not averaged per batch: windows of different lengths then weigh by tokens.
            nll_sum += cross_entropy_on_ids(logits, ids, reduction="sum").item()
            correct += (logits[:, :-1].argmax(-1) == targets).sum().item()
            tokens += targets.numel()
    if not math.isfinite(nll_sum):
        # no score at all: a NaN loss made perplexity nan and accuracy a plausible number
        _refuse_non_finite_loss(model, nll_sum)
    return TokenScores(nll_sum, correct, tokens)


def _refuse_non_finite_loss(model: torch.nn.Module, loss: float) -> None:
    """A ValueError that says why the loss is not finite: the weight that is not, by name, or an
    overflow when every weight is finite."""
    try:
        require_finite_parameters(model)
    except ValueError as error:
        raise ValueError(f"the model's loss is {loss} on these windows: {error}") from None
    raise ValueError(
        f"the model's loss is {loss} on these windows, though every weight is finite: an "
        "activation overflowed (float16 tops out at 65504) or was divided by zero; score the "
        "model in float32 or bfloat16, or find the first layer whose output is not finite"
    )


def _same_length_batches(windows: Sequence[torch.Tensor], batch_size: int):
    """Stack windows of equal length into batches (no padding, so no pad token can be scored)."""
    by_length: dict[int, list[torch.Tensor]] = {}
    for window in windows:
        if window.dim() != 1 or window.numel() < 2:
            raise ValueError(
                f"each window must be 1-D token ids of length >= 2, got shape {tuple(window.shape)}"
            )
        by_length.setdefault(window.numel(), []).append(window)
    for group in by_length.values():
        for start in range(0, len(group), batch_size):
            yield torch.stack(group[start : start + batch_size])


def perplexity(model: torch.nn.Module, windows: Sequence[torch.Tensor], batch_size: int = 8):
    """exp(mean cross-entropy per predicted token) over all windows."""
    return score_tokens(model, windows, batch_size).perplexity


def next_token_accuracy(
    model: torch.nn.Module, windows: Sequence[torch.Tensor], batch_size: int = 8
) -> float:
    """The fraction of predicted tokens where the model's most likely token was the right one."""
    return score_tokens(model, windows, batch_size).accuracy
