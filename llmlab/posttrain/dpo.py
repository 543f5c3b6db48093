"""Direct Preference Optimization (Rafailov et al. 2023): learning from pairs of answers, one
preferred ("chosen") over the other ("rejected"), with no reward model and no sampling.

RLHF first fits a reward model r(prompt, answer) to the pairs, then trains the policy pi to earn
reward while staying near a frozen reference pi_ref (the SFT model): maximise r - beta * KL(pi ||
pi_ref). That objective has a closed-form best policy, pi*(y | x) = pi_ref(y | x) exp(r(x, y) /
beta) / Z(x). Read backwards, any policy defines the reward it is best for:

    r(x, y) = beta * (log pi(y | x) - log pi_ref(y | x)) + beta * log Z(x).

The pairs are modelled as Bradley-Terry, p(chosen beats rejected) = sigmoid(r_chosen -
r_rejected). In that difference Z(x), the one intractable term, cancels, so the policy is trained
on the pairs directly, by maximum likelihood:

    loss = -log sigmoid(beta * ((log pi(c) - log pi_ref(c)) - (log pi(r) - log pi_ref(r)))),

averaged over the pairs (TRL's loss_type "sigmoid", its default). The log-probabilities are of
the whole completion, summed over its tokens (llmlab.posttrain.logprobs.completion_logprobs);
the reference's are computed once, without a gradient. beta * (log pi - log pi_ref) is each
answer's implicit reward: watching it shows whether the chosen answers gain on the rejected
ones, and whether both fall together (a common sight: the loss only needs the gap to widen).
beta sets how far from the reference the policy may drift: a small beta lets it go further.
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F


class DPOLoss(NamedTuple):
    loss: torch.Tensor  # 0-d: the mean over the pairs
    chosen_rewards: torch.Tensor  # (pairs,): beta * (log pi - log pi_ref), detached
    rejected_rewards: torch.Tensor


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
             reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
             beta: float = 0.1) -> DPOLoss:
    """DPO's sigmoid loss from per-sequence log-probabilities (pairs,) of the chosen and the
    rejected completions under the policy and the reference; beta 0.1 as TRL's default."""
    chosen_ratio = policy_chosen - reference_chosen
    rejected_ratio = policy_rejected - reference_rejected
    # logsigmoid, not log(sigmoid): exact for a large negative margin, where sigmoid rounds to 0.
    loss = -F.logsigmoid(beta * (chosen_ratio - rejected_ratio)).mean()
    # The rewards are for watching the run, not for the gradient.
    return DPOLoss(loss, beta * chosen_ratio.detach(), beta * rejected_ratio.detach())
