"""The next-token loss: the one cross-entropy of a language model's logits against the tokens that
follow, which the trainer, the parallel harnesses, the fine-tunes, the metrics and the LSTM's own
`labels=` loss all call. It lives with the models, not with the metrics above them, because a
model's forward (the LSTM's, as a `transformers` causal LM does) computes it too."""

import torch
import torch.nn.functional as F


def next_token_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, *, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy of each position's logits (batch, length, vocab) against its target
    (batch, length): the inputs shifted by one, so position t predicts token t + 1. A target of
    -100 (cross_entropy's ignore_index) counts for nothing: prompt and padding positions."""
    # In float32: bf16 or fp16 logits from autocast would round the log-softmax's small terms.
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction=reduction)


def cross_entropy_on_ids(
    logits: torch.Tensor, ids: torch.Tensor, *, reduction: str = "mean"
) -> torch.Tensor:
    """next_token_cross_entropy of the logits a model gave for `ids` against the ids themselves:
    position t predicts ids[:, t + 1]; the last position has nothing to predict."""
    return next_token_cross_entropy(logits[:, :-1], ids[:, 1:], reduction=reduction)


def next_token_loss(
    model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Mean next-token cross-entropy of `model` on `inputs` (targets are already shifted): a
    `transformers` model (its output's logits) or a plain module that returns the logits."""
    output = model(inputs)
    logits = output.logits if hasattr(output, "logits") else output
    return next_token_cross_entropy(logits, targets)
