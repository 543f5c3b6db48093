"""Post-training: the log-probability a model gives a completion (per token and per sequence, the
prompt unscored), DPO's loss on preference pairs with its implicit rewards, and GRPO's group
advantages and clipped, KL-regularised loss for rewards a program checks. Each loss is checked
against TRL's trainers (tests/posttrain)."""

from llmlab.posttrain.dpo import DPOLoss, dpo_loss
from llmlab.posttrain.grpo import STD_EPSILON, GRPOLoss, group_advantages, grpo_loss
from llmlab.posttrain.logprobs import completion_logprobs, completion_mask, token_logprobs

__all__ = [
    "STD_EPSILON", "DPOLoss", "GRPOLoss", "completion_logprobs", "completion_mask", "dpo_loss",
    "group_advantages", "grpo_loss", "token_logprobs",
]
