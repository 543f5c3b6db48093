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

The loss can fall while both answers lose probability, the chosen less than the rejected; the
probability they gave up goes to answers in neither, and a model can get worse at its task
while its DPO loss falls. An SFT term on the chosen answers, the mean negative log-likelihood
of their tokens (Pang et al. 2024, "RPO"; TRL's loss_type ["sigmoid", "sft"]), holds them up.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from llmlab.models.eval_mode import eval_mode
from llmlab.posttrain.logprobs import completion_logprobs
from llmlab.posttrain.rollouts import sample_groups
from llmlab.train.finetune import IGNORE, TaskExample, task_batch


class DPOLoss(NamedTuple):
    loss: torch.Tensor  # 0-d: the mean over the pairs
    chosen_rewards: torch.Tensor  # (pairs,): beta * (log pi - log pi_ref), detached
    rejected_rewards: torch.Tensor


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
             reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
             beta: float = 0.1, sft_weight: float = 0.0,
             chosen_tokens: torch.Tensor | None = None) -> DPOLoss:
    """DPO's sigmoid loss from per-sequence log-probabilities (pairs,) of the chosen and the
    rejected completions under the policy and the reference; beta 0.1 as TRL's default. With
    `sft_weight`, plus that weight times the chosen tokens' mean negative log-likelihood, which
    needs each chosen completion's token count (`chosen_tokens`, (pairs,)): TRL's loss_type
    ["sigmoid", "sft"] with loss_weights [1, sft_weight]."""
    chosen_ratio = policy_chosen - reference_chosen
    rejected_ratio = policy_rejected - reference_rejected
    # logsigmoid, not log(sigmoid): exact for a large negative margin, where sigmoid rounds to 0.
    loss = -F.logsigmoid(beta * (chosen_ratio - rejected_ratio)).mean()
    if sft_weight:
        if chosen_tokens is None:
            raise ValueError("the SFT term needs chosen_tokens, each chosen completion's length")
        # A mean over the batch's tokens, not over answers: a long answer counts for more.
        loss = loss - sft_weight * policy_chosen.sum() / chosen_tokens.sum()
    # The rewards are for watching the run, not for the gradient.
    return DPOLoss(loss, beta * chosen_ratio.detach(), beta * rejected_ratio.detach())


@dataclass(frozen=True)
class PreferencePair:
    chosen: TaskExample  # the prompt's ids, then the completion a checker accepted
    rejected: TaskExample  # the same prompt, then one it refused


def preference_pairs(model: nn.Module, tokenizer, prompts: Sequence[str],
                     reward: Callable[[int, str], float], samples_per_prompt: int, *,
                     max_new_tokens: int, stop_id: int, answers: Sequence[str] | None = None,
                     seed: int = 0) -> list[PreferencePair]:
    """Pairs from `samples_per_prompt` of the model's own completions of each prompt, scored by
    `reward(prompt number, text)`. On-policy (no `answers`): a prompt gives one pair, its
    best-scored completion chosen and its worst rejected, when they differ in reward, none when
    all its completions tie. With `answers` (a written answer per prompt, ended by `stop_id`):
    the written answer is chosen and the worst-scored completion rejected, when it scores below
    the written answer; a prompt the model always answers as well gives none."""
    if answers is not None and len(answers) != len(prompts):
        raise ValueError(f"{len(answers)} answers for {len(prompts)} prompts")
    rollouts = sample_groups(model, tokenizer, prompts, samples_per_prompt,
                             max_new_tokens=max_new_tokens, stop_id=stop_id, seed=seed)
    pairs = []
    for number, prompt in enumerate(prompts):
        rows = range(number * samples_per_prompt, (number + 1) * samples_per_prompt)
        scored = sorted(rows, key=lambda row: reward(number, rollouts.completions[row]))
        worst, best = scored[0], scored[-1]
        if answers is None:
            chosen = _example(rollouts, best)
            best_reward = reward(number, rollouts.completions[best])
        else:
            ids = tokenizer.encode(prompt)
            chosen = TaskExample((*ids, *tokenizer.encode(answers[number]), stop_id), len(ids))
            best_reward = reward(number, answers[number])
        if best_reward > reward(number, rollouts.completions[worst]):
            pairs.append(PreferencePair(chosen, _example(rollouts, worst)))
    return pairs


def _example(rollouts, row: int) -> TaskExample:
    completion = (rollouts.labels[row] != IGNORE).nonzero().flatten()
    end = int(completion[-1]) + 1
    return TaskExample(tuple(rollouts.ids[row, :end].tolist()), int(completion[0]))


@dataclass(frozen=True)
class DPOStep:
    loss: float
    chosen_reward: float  # mean implicit reward, beta * (log pi - log pi_ref), of the chosen
    rejected_reward: float
    chosen_logprob: float  # mean log pi(completion | prompt) of the chosen under the policy
    rejected_logprob: float
    accuracy: float  # the share of pairs whose chosen completion has the higher implicit reward


def train_dpo(policy: nn.Module, reference: nn.Module, pairs: Sequence[PreferencePair], *,
              steps: int, batch_size: int, lr: float, beta: float = 0.1, sft_weight: float = 0.0,
              pad_id: int = 0, seed: int = 0, progress: bool = True) -> list[DPOStep]:
    """DPO on `pairs` for `steps` batches of `batch_size` pairs (shuffled with `seed` once per
    pass), AdamW at a constant `lr`; the reference's log-probabilities are computed once;
    `sft_weight` adds dpo_loss's SFT term on the chosen answers. The policy is left in training
    mode, as llmlab.train.finetune leaves a model."""
    if len(pairs) < batch_size:
        raise ValueError(f"{len(pairs)} pairs cannot fill a batch of {batch_size}")
    chosen, rejected = (task_batch([getattr(pair, side) for pair in pairs], pad_id)
                        for side in ("chosen", "rejected"))
    with torch.no_grad(), eval_mode(reference):
        reference_chosen = completion_logprobs(reference, *chosen)
        reference_rejected = completion_logprobs(reference, *rejected)
    chosen_tokens = (chosen[1] != IGNORE).sum(dim=1)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=lr,
                                  weight_decay=0.0)
    order = torch.Generator().manual_seed(seed)
    rows: list[int] = []
    history = []
    policy.train()
    for _ in tqdm(range(steps), desc="DPO", disable=not progress, leave=False):
        if len(rows) < batch_size:
            rows = torch.randperm(len(pairs), generator=order).tolist()
        batch, rows = rows[:batch_size], rows[batch_size:]
        policy_chosen = completion_logprobs(policy, chosen[0][batch], chosen[1][batch])
        policy_rejected = completion_logprobs(policy, rejected[0][batch], rejected[1][batch])
        result = dpo_loss(policy_chosen, policy_rejected, reference_chosen[batch],
                          reference_rejected[batch], beta, sft_weight, chosen_tokens[batch])
        result.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        history.append(DPOStep(
            result.loss.item(), result.chosen_rewards.mean().item(),
            result.rejected_rewards.mean().item(), policy_chosen.mean().item(),
            policy_rejected.mean().item(),
            (result.chosen_rewards > result.rejected_rewards).float().mean().item(),
        ))
    return history
