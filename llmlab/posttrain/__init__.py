"""Post-training: the log-probability a model gives a completion (per token and per sequence, the
prompt unscored); rollouts, groups of the policy's own sampled completions; DPO's loss on
preference pairs with its implicit rewards (and an optional SFT term on the chosen answers), the
pairs a checker picks (sample against sample, or a written answer against the model's mistake)
and the loop that trains on them; GRPO's group advantages, its clipped, KL-regularised loss and
its loop, for rewards a program checks; a GRPO step's memory beside its plan; the same RL
through TRL's own GRPOTrainer, with Lab 10's choices (trl_grpo: `full`, online). Each loss is
checked against TRL's trainers (tests/posttrain)."""

from llmlab.posttrain.dpo import (
    DPOLoss,
    DPOStep,
    PreferencePair,
    dpo_loss,
    preference_pairs,
    train_dpo,
)
from llmlab.posttrain.grpo import (
    STD_EPSILON,
    GRPOLoss,
    GRPOStep,
    group_advantages,
    grpo_loss,
    train_grpo,
)
from llmlab.posttrain.logprobs import completion_logprobs, completion_mask, token_logprobs
from llmlab.posttrain.rollouts import Rollouts, sample_groups

__all__ = [
    "STD_EPSILON", "DPOLoss", "DPOStep", "GRPOLoss", "GRPOStep", "PreferencePair", "Rollouts",
    "completion_logprobs", "completion_mask", "dpo_loss", "group_advantages", "grpo_loss",
    "preference_pairs", "sample_groups", "token_logprobs", "train_dpo", "train_grpo",
]
