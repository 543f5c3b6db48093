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

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from tqdm.auto import tqdm

from llmlab.models.eval_mode import eval_mode
from llmlab.posttrain.logprobs import completion_mask, token_logprobs
from llmlab.posttrain.rollouts import sample_groups

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


@dataclass(frozen=True)
class GRPOStep:
    reward: float  # the mean reward of the step's rollouts
    kl: float  # the mean k3 estimate of KL(policy || reference) over their tokens
    entropy: float  # the sampled tokens' mean -log p: an estimate of the policy's entropy
    clipped_fraction: float  # the share of tokens whose ratio the clip held back


def grpo_optimizer(policy: nn.Module, lr: float) -> torch.optim.Optimizer:
    """AdamW on the policy's trainable parameters, with no weight decay: it would pull them
    toward zero, away from the reference."""
    return torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=lr,
                             weight_decay=0.0)


def grpo_step(
    policy: nn.Module,
    reference: nn.Module,
    optimizer: torch.optim.Optimizer,
    tokenizer,
    prompts: Sequence[str],
    chosen: Sequence[int],
    reward: Callable[[int, str], float],
    *,
    group_size: int,
    max_new_tokens: int,
    stop_id: int,
    beta: float = 0.04,
    epsilon: float = 0.2,
    updates_per_rollout: int = 2,
    seed: int = 0,
    watch: Mapping[str, AbstractContextManager] | None = None,
) -> GRPOStep:
    """One step of GRPO (see train_grpo) on the prompts numbered `chosen`, each completion scored
    by `reward(its prompt's number, completion text)`. Each of its three phases runs inside
    `watch`'s context of its name, when there is one: "generation" (sampling the rollouts),
    "scoring" (their log-probabilities under the reference, and under the policy that sampled
    them for the rows the first update moves the policy before) and "update"
    (llmlab.posttrain.memory watches them with memory trackers)."""
    watch = watch or {}
    with watch.get("generation", nullcontext()):
        rollouts = sample_groups(policy, tokenizer, [prompts[i] for i in chosen], group_size,
                                 max_new_tokens=max_new_tokens, stop_id=stop_id, seed=seed)
    rewards = torch.tensor([reward(chosen[number], text) for number, text in
                            zip(rollouts.prompt_index, rollouts.completions, strict=True)])
    advantages = group_advantages(rewards, group_size)
    mask = completion_mask(rollouts.labels)
    slices = torch.arange(len(rewards)).chunk(updates_per_rollout)
    later = torch.arange(len(slices[0]), len(rewards))  # the rows updated after the policy moved
    with (watch.get("scoring", nullcontext()), torch.no_grad(), eval_mode(policy),
          eval_mode(reference)):
        ref = token_logprobs(reference, rollouts.ids, rollouts.labels)
        old = torch.zeros_like(ref)
        if len(later):  # none when every rollout is updated at once
            old[later] = token_logprobs(policy, rollouts.ids[later], rollouts.labels[later])
    # The log-probs are on the model's device; the rewards were scored on the host.
    advantages, mask = advantages.to(ref.device), mask.to(ref.device)
    policy.train()
    stats = []
    with watch.get("update", nullcontext()):
        for number, rows in enumerate(slices):
            logprobs = token_logprobs(policy, rollouts.ids[rows], rollouts.labels[rows])
            if number == 0:
                # The first slice is on-policy: the policy that sampled it is the one scoring it
                # now, so its old log-probs are this forward's, detached (as TRL's, a forward
                # saved: every ratio is exactly 1).
                old[rows] = logprobs.detach()
            result = grpo_loss(logprobs, old[rows], ref[rows], advantages[rows], mask[rows],
                               epsilon, beta)
            result.loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            stats.append((result.kl.item(), result.clipped_fraction.item()))
    return GRPOStep(
        reward=rewards.mean().item(),
        kl=sum(kl for kl, _ in stats) / len(stats),
        entropy=(-(old * mask).sum() / mask.sum()).item(),
        clipped_fraction=sum(clipped for _, clipped in stats) / len(stats),
    )


def same_length_draws(tokenizer, prompts: Sequence[str], count: int,
                      seed: int) -> Iterator[list[int]]:
    """Endless draws of `count` prompt numbers, all of one length in tokens: a prompt drawn at
    random, then `count` drawn (with replacement) among the prompts as long as it. Each prompt
    is still drawn as often as any other, and a step's rollouts are sampled in one call
    (llmlab.posttrain.rollouts samples prompts of one length together, nothing padded), where a
    draw across lengths makes one call per length."""
    lengths = [len(tokenizer(prompt).input_ids) for prompt in prompts]
    by_length = defaultdict(list)
    for number, length in enumerate(lengths):
        by_length[length].append(number)
    draw = torch.Generator().manual_seed(seed)
    while True:
        first = int(torch.randint(len(prompts), (1,), generator=draw))
        same = by_length[lengths[first]]
        yield [same[i] for i in torch.randint(len(same), (count,), generator=draw).tolist()]


def train_grpo(
    policy: nn.Module,
    reference: nn.Module,
    tokenizer,
    prompts: Sequence[str],
    reward: Callable[[int, str], float],
    *,
    steps: int,
    prompts_per_step: int,
    group_size: int,
    lr: float,
    max_new_tokens: int,
    stop_id: int,
    beta: float = 0.04,
    epsilon: float = 0.2,
    updates_per_rollout: int = 2,
    seed: int = 0,
    progress: bool = True,
) -> list[GRPOStep]:
    """GRPO on `prompts`: each step samples `group_size` completions of `prompts_per_step`
    prompts drawn at random (of one length in tokens: same_length_draws), scores each with
    `reward(prompt number, completion text)`, and takes `updates_per_rollout` optimizer steps on
    equal slices of the rollouts. The first slice is on-policy (every ratio is 1); the later
    ones were sampled by the policy before the first update, so their ratios move and the clip
    can hold them back. Returns one GRPOStep per step; the policy is left in training mode, as
    llmlab.train.finetune leaves a model."""
    if steps < 1 or prompts_per_step < 1:
        raise ValueError(f"steps and prompts_per_step must be at least 1, got {steps} and "
                         f"{prompts_per_step}")
    if (prompts_per_step * group_size) % updates_per_rollout:
        raise ValueError(f"{prompts_per_step * group_size} rollouts do not split into "
                         f"{updates_per_rollout} equal updates")
    optimizer = grpo_optimizer(policy, lr)
    draws = same_length_draws(tokenizer, prompts, prompts_per_step, seed)
    history = []
    for step in tqdm(range(steps), desc="GRPO", disable=not progress, leave=False):
        chosen = next(draws)
        history.append(grpo_step(
            policy, reference, optimizer, tokenizer, prompts, chosen, reward,
            group_size=group_size, max_new_tokens=max_new_tokens, stop_id=stop_id, beta=beta,
            epsilon=epsilon, updates_per_rollout=updates_per_rollout, seed=seed * 1_000_003 + step,
        ))
    return history
