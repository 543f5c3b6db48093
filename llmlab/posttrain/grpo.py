"""Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath): reinforcement learning
from rewards a program can check (is the answer right? does the output parse?), with no value
model.

For each prompt the policy samples a group of completions and a checker scores each one. A
completion's advantage is how much better it did than its own group: its reward minus the group's
mean, divided by the group's standard deviation. The group is the baseline PPO needed a learned
value model for; a group whose completions all scored the same teaches nothing (every advantage
is 0), which is why a task must be neither too easy nor too hard for the model.

Each completion token then gets PPO's clipped objective with that advantage A. With the
probability ratio rho = pi(token) / pi_old(token) to the policy that sampled the completion,

    per token:  -min(rho * A, clip(rho, 1 - epsilon, 1 + epsilon) * A) + beta * KL,

where the clip stops a step from moving a token's probability more than epsilon away from where
the sampling left it (the min keeps the more pessimistic of the two). On the first step after
sampling pi_old is pi itself: rho is 1, yet its gradient is A * grad log pi, the policy gradient.
KL is the k3 estimator of KL(pi || pi_ref) to a frozen reference, exp(ref - lp) - (ref - lp) - 1:
never negative, 0 where the two agree, and unbiased for tokens drawn from pi.

The per-token terms are averaged over each completion's own tokens, then over the completions:
TRL's loss_type "grpo", the form of the DeepSeekMath paper, taught here because every completion
counts equally in it. TRL 1.16's default is "dapo" (and its default beta is 0: no reference):
one mean over all the completion tokens of the batch, because "grpo" is biased by length (a long
wrong answer's tokens are each pushed down less than a short one's, so wrong answers drift
longer), which DAPO and Dr. GRPO correct.
"""

from collections.abc import Sequence
from typing import NamedTuple

import torch

STD_EPSILON = 1e-4  # TRL's: keeps a group whose rewards are all equal at advantage 0, not 0 / 0


def group_advantages(rewards: torch.Tensor | Sequence[float], group_size: int,
                     scale: bool = True) -> torch.Tensor:
    """Each reward minus the mean of its group, divided (when `scale`) by the group's standard
    deviation + STD_EPSILON; the groups are `group_size` consecutive rewards. The deviation is
    the sample one (n - 1), as TRL's; scale=False is Dr. GRPO's advantage."""
    rewards = torch.as_tensor(rewards)
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    if group_size < 2 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not make groups of {group_size}: a group "
                         "needs 2 or more completions of one prompt, its baseline")
    groups = rewards.view(-1, group_size)
    advantages = groups - groups.mean(1, keepdim=True)
    if scale:
        advantages = advantages / (groups.std(1, keepdim=True) + STD_EPSILON)
    return advantages.flatten()


class GRPOLoss(NamedTuple):
    loss: torch.Tensor  # 0-d
    kl: torch.Tensor  # 0-d, detached: the mean k3 estimate over the batch's completion tokens
    clipped_fraction: torch.Tensor  # 0-d: the share of completion tokens whose clip is active


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor,
              reference_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              epsilon: float = 0.2, beta: float = 0.04) -> GRPOLoss:
    """GRPO's loss from per-token log-probabilities (completions, tokens) under the policy, the
    policy that sampled them and the reference, the advantage of each completion (completions,)
    and the mask (1 on completion tokens, 0 on padding); epsilon 0.2 as PPO's (and TRL's), beta
    0.04 as DeepSeekMath's."""
    mask = mask.to(logprobs.dtype)
    advantages = advantages[:, None]  # one per completion, the same for each of its tokens
    ratio = torch.exp(logprobs - old_logprobs)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    log_ratio = reference_logprobs - logprobs
    kl = torch.exp(log_ratio) - log_ratio - 1
    per_token = per_token + beta * kl
    # Each completion's mean over its own tokens (clamped: an empty completion adds 0, not 0 / 0).
    loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    # The clip is active where it changed the min: rho beyond 1 + epsilon with A > 0, or below
    # 1 - epsilon with A < 0; there the token gets no gradient.
    active = ((ratio > 1 + epsilon) & (advantages > 0)) | ((ratio < 1 - epsilon) & (advantages < 0))
    tokens = mask.sum().clamp(min=1)
    return GRPOLoss(loss, (kl.detach() * mask).sum() / tokens, (active * mask).sum() / tokens)
