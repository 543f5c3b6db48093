"""How likely a model finds a completion: the number every post-training loss is built from.

After pretraining, a model is taught to answer: a prompt and a completion are written as one
sequence, and the losses of post-training are all about the completion's log-probability under
the model, log p(completion | prompt) = the sum over its tokens of log p(token | all before it).
- SFT raises it for the completions of a demonstration set (the fine-tuning loss);
- DPO raises it for the preferred completion of a pair and lowers it for the other, measured
  against a frozen copy of the model (llmlab.posttrain.dpo): one number per sequence, the sum;
- GRPO weighs each completion token's log-probability by how much better than its siblings the
  whole completion scored (llmlab.posttrain.grpo): one number per token.

The labels follow the fine-tuning convention (llmlab.train.finetune.task_batch): the ids where
the completion is, IGNORE (-100) on the prompt and the padding, so the prompt is given, never
scored. The logits at position t predict the token at t + 1, so the scores line up with
labels[:, 1:]: a sequence of length L gets L - 1 of them.
"""

import torch
import torch.nn.functional as F
from torch import nn

from llmlab.models import cross_entropy_on_ids
from llmlab.train.finetune import IGNORE


def token_logprobs(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor,
                   attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """(batch, length - 1): log p(labels[:, t + 1] | ids[:, : t + 1]) where that label is a
    token, 0 where it is IGNORE. `attention_mask` (1 on tokens, 0 on padding) is needed only when
    padding comes before tokens (prompts padded on the left); padding after them is never read."""
    device = next(model.parameters()).device
    mask = None if attention_mask is None else attention_mask.to(device)
    # Only the positions from the first completion token on are scored (the prompts come
    # first): the model's logits_to_keep spares the head's matmul and softmax on the rest, as
    # TRL asks, about a tenth of the work on short answers after long prompts.
    scored = (labels[:, 1:] != IGNORE).any(0).nonzero()
    first = int(scored[0]) if len(scored) else labels.shape[1] - 1
    # No cache: it only helps generation, and a forward that keeps one holds every layer's keys
    # and values (a fresh transformers config asks for one).
    logits = model(input_ids=ids.to(device), attention_mask=mask, use_cache=False,
                   logits_to_keep=labels.shape[1] - first).logits
    # The one next-token cross-entropy, per position: its negative is the log-probability, and
    # its ignore_index leaves 0 on the prompt and the padding.
    scores = -cross_entropy_on_ids(logits, labels[:, first:].to(device), reduction="none")
    return F.pad(scores.view(len(ids), -1), (first, 0))  # 0 for the positions not computed


def completion_logprobs(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor,
                        attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """(batch,): log p(completion | prompt) of each sequence, the sum of its `token_logprobs`."""
    return token_logprobs(model, ids, labels, attention_mask).sum(-1)


def completion_mask(labels: torch.Tensor) -> torch.Tensor:
    """(batch, length - 1) of 0 and 1, float32 as `token_logprobs`: 1 where it scores a
    completion token, 0 on the prompt and the padding."""
    return (labels[:, 1:] != IGNORE).float()
