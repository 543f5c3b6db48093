"""Checks for Lab 10 (post-training), and the versions the lab falls back to.

Exercise 2 (DPO's loss from per-token log-probabilities and the masks of the completions) and
Exercise 3 (GRPO's loss, its group advantages included) are checked against llmlab.posttrain,
whose losses are themselves checked against TRL's trainers. The inputs are random log-probs with
prompts and padding around each completion; the prompt's and the padding's positions hold
log-probs too (as a model gives them), so a mask left out shows. When an answer differs, the
check recomputes each likely mistake and names the one the answer matches.
"""

import math
from typing import NamedTuple

import torch

from llmlab.course.checks import ExerciseFailed, call_or_fail, exercise, passed, real_number
from llmlab.posttrain import STD_EPSILON, dpo_loss, group_advantages, grpo_loss

_REL, _ABS = 1e-4, 1e-6  # float32 answers against float64 references


def _close(got: float, expected: float) -> bool:
    return math.isclose(got, expected, rel_tol=_REL, abs_tol=_ABS)


def _one_loss(name: str, call_text: str, got, count: int, per: str) -> float:
    """The learner's loss as a float: any real number, 0-d or one-element tensor or array; a
    failure that says what came back otherwise (`count` numbers: one per `per`, not averaged)."""
    number = real_number(got)
    if number is not None:
        return number
    try:
        values = torch.as_tensor(got).detach().double().flatten().tolist()
    except (TypeError, ValueError, RuntimeError):
        values = None
    if values is not None and len(values) == 1:
        return values[0]
    if values is not None and len(values) == count:
        raise ExerciseFailed(f"{name}: {call_text} returned {count} numbers, one per {per}: the "
                             "loss is one number, their mean.")
    raise ExerciseFailed(f"{name}: {call_text} returned {got!r} (a {type(got).__name__}); "
                         "return the loss: one number (a 0-d tensor or a float).")


def _not_finite(name: str, call_text: str, got: float, hint: str) -> None:
    if not math.isfinite(got):
        raise ExerciseFailed(f"{name}: {call_text} returned {got}. {hint}".strip())


# ---------------------------------------------------------------- Exercise 2: DPO's loss

_DPO = "Exercise 2 (DPO's loss)"


def _completion_sum(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(pairs,): the sum of each sequence's log-probs over its completion tokens."""
    return (logprobs * mask).sum(-1)


def dpo_loss_reference(policy_chosen, policy_rejected, reference_chosen, reference_rejected,
                       chosen_mask, rejected_mask, beta) -> torch.Tensor:
    """The lab's fallback for Exercise 2: DPO's loss (the mean over the pairs) from per-token
    log-probs (pairs, tokens) and masks (1 on the completion's tokens): llmlab.posttrain.dpo_loss
    on each completion's summed log-probs."""
    return dpo_loss(_completion_sum(policy_chosen, chosen_mask),
                    _completion_sum(policy_rejected, rejected_mask),
                    _completion_sum(reference_chosen, chosen_mask),
                    _completion_sum(reference_rejected, rejected_mask), beta).loss


class _Pairs(NamedTuple):
    policy_chosen: torch.Tensor
    policy_rejected: torch.Tensor
    reference_chosen: torch.Tensor
    reference_rejected: torch.Tensor
    chosen_mask: torch.Tensor
    rejected_mask: torch.Tensor
    beta: float


def _masks(generator, rows: int, width: int, prompts: torch.Tensor) -> torch.Tensor:
    """(rows, width) of 0/1 (int64, as attention masks come): a completion of 2 or more tokens
    after each row's prompt, then padding."""
    ends = prompts + torch.randint(2, width // 2, (rows,), generator=generator)
    positions = torch.arange(width)
    return ((positions >= prompts[:, None]) & (positions < ends[:, None])).long()


def _dpo_cases() -> list[_Pairs]:
    generator = torch.Generator().manual_seed(10)
    cases = []
    for pairs, width, beta in ((6, 16, 0.1), (5, 12, 0.5), (1, 10, 0.25)):
        prompts = torch.randint(1, width // 2, (pairs,), generator=generator)  # a pair's prompt
        reference_chosen, reference_rejected = -4 * torch.rand(2, pairs, width,
                                                               generator=generator)
        # The policy near its reference, as in training: margins of a few nats.
        policy_chosen, policy_rejected = (
            reference + 0.5 * torch.randn(pairs, width, generator=generator)
            for reference in (reference_chosen, reference_rejected))
        cases.append(_Pairs(policy_chosen, policy_rejected, reference_chosen, reference_rejected,
                            _masks(generator, pairs, width, prompts),
                            _masks(generator, pairs, width, prompts), beta))
    return cases


def _dpo_value(case: _Pairs, *, sums=_completion_sum, reference=True, swap=False, beta_inside=True,
               reduce="mean") -> float:
    """DPO's loss in float64 with one likely mistake, or none."""
    def total(name: str, mask) -> torch.Tensor:
        return sums(getattr(case, name).double(), mask.double())

    chosen = total("policy_chosen", case.chosen_mask)
    rejected = total("policy_rejected", case.rejected_mask)
    ref_chosen, ref_rejected = (total("reference_chosen", case.chosen_mask),
                                total("reference_rejected", case.rejected_mask))
    if not reference:
        ref_chosen, ref_rejected = torch.zeros_like(chosen), torch.zeros_like(rejected)
    if swap:
        chosen, rejected, ref_chosen, ref_rejected = rejected, chosen, ref_rejected, ref_chosen
    beta = case.beta if beta_inside else 1.0
    loss = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta).loss.item()
    loss *= 1.0 if beta_inside else case.beta
    return {"mean": loss, "sum": loss * len(chosen), "negated": -loss}[reduce]


def _dpo_mistakes(case: _Pairs) -> list[tuple[float, str]]:
    return [
        (_dpo_value(case, reference=False),
         "your loss does not change with the reference's log-probabilities: DPO's implicit "
         "reward is how much more likely the policy makes an answer than the frozen reference "
         "does, so both of the reference's log-probs belong in the margin."),
        (_dpo_value(case, sums=lambda logprobs, mask: logprobs.sum(-1)),
         "your log-probabilities include the prompt's and the padding's tokens: only the "
         "completion's tokens (where the mask is 1) make an answer's log-probability."),
        (_dpo_value(case, swap=True),
         "your loss falls when the rejected answer gains on the chosen one: the margin is "
         "taken the wrong way round."),
        (_dpo_value(case, sums=lambda logprobs, mask: (logprobs * mask).sum(-1) / mask.sum(-1)),
         "you averaged the log-probs over the completion's tokens: an answer's log-probability "
         "is that of all its tokens together, the log of a product."),
        (_dpo_value(case, beta_inside=False),
         "beta scales your loss from outside the log-sigmoid: it belongs inside, scaling the "
         "margin, where it sets how sharply a margin turns into a preference."),
        (_dpo_value(case, reduce="sum"),
         "your loss is the sum over the pairs: take their mean, so that the loss (and the "
         "learning rate that suits it) does not grow with the batch."),
        (_dpo_value(case, reduce="negated"),
         "your value is the log-likelihood of the preferences, which training raises: the loss "
         "an optimizer lowers is its negative."),
    ]


@exercise(fallback=dpo_loss_reference,
          fallback_name="llmlab.course.checks.lab10.dpo_loss_reference")
def exercise_dpo_loss(dpo_loss_fn) -> None:
    """Exercise 2: dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected,
    chosen_mask, rejected_mask, beta) -> the loss, from per-token log-probs (pairs, tokens) and
    masks of 1 on the completion's tokens, 0 on the prompt and the padding."""
    name = _DPO
    for case in _dpo_cases():
        pairs, width = case.chosen_mask.shape
        call_text = (f"dpo_loss(<per-token log-probs of {pairs} pair(s), {width} positions, "
                     f"prompt and padding around each completion>, beta={case.beta})")
        got = call_or_fail(name, call_text, dpo_loss_fn, *(t.clone() for t in case[:6]),
                           case.beta)
        value = _one_loss(name, call_text, got, pairs, "pair")
        _not_finite(name, call_text, value, "")
        expected = _dpo_value(case)
        if _close(value, expected):
            continue
        hint = next((text for wrong, text in _dpo_mistakes(case) if _close(value, wrong)),
                    "Try each step on one pair: each answer's log-probability (its completion's "
                    "tokens only), the margin against the reference, beta, the log-sigmoid, "
                    "then the mean over the pairs.")
        raise ExerciseFailed(f"{name}: {call_text} returned {value:.6g}; DPO's loss is "
                             f"{expected:.6g}. {hint}".strip())
    passed(name, "llmlab's DPO loss on random pairs with prompts and padding, three betas, "
                 "and a batch of one pair")


# ---------------------------------------------------------------- Exercise 3: GRPO's loss

_GRPO = "Exercise 3 (GRPO's loss)"


def grpo_loss_reference(logprobs, old_logprobs, reference_logprobs, rewards, mask, group_size,
                        epsilon, beta) -> torch.Tensor:
    """The lab's fallback for Exercise 3: GRPO's loss from per-token log-probs (completions,
    tokens), one reward per completion (groups of `group_size` consecutive completions) and the
    mask of the completions' tokens: llmlab.posttrain's group_advantages, then grpo_loss."""
    advantages = group_advantages(rewards, group_size).to(logprobs.dtype)
    return grpo_loss(logprobs, old_logprobs, reference_logprobs, advantages, mask, epsilon,
                     beta).loss


class _Rollouts(NamedTuple):
    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    reference_logprobs: torch.Tensor
    rewards: torch.Tensor
    mask: torch.Tensor
    group_size: int
    epsilon: float
    beta: float


def _grpo_cases() -> list[_Rollouts]:
    generator = torch.Generator().manual_seed(10)
    cases = []
    # Verifiable rewards (0 or 1, one group all right: its spread is 0), then graded ones.
    for groups, group_size, width, epsilon, beta, graded in ((3, 4, 10, 0.2, 0.04, False),
                                                            (2, 5, 8, 0.1, 0.2, True)):
        rows = groups * group_size
        logprobs = -3 * torch.rand(rows, width, generator=generator)
        # The sampling policy and the reference near the policy: some ratios beyond the clip.
        old = logprobs + 0.3 * torch.randn(rows, width, generator=generator)
        reference = logprobs + 0.3 * torch.randn(rows, width, generator=generator)
        lengths = torch.randint(3, width + 1, (rows,), generator=generator)
        mask = (torch.arange(width) < lengths[:, None]).long()  # the completion, then padding
        if graded:
            rewards = 2 * torch.randn(rows, generator=generator) + 1
        else:
            rewards = torch.randint(0, 2, (rows,), generator=generator).float()
            rewards[:group_size] = 1.0
        cases.append(_Rollouts(logprobs, old, reference, rewards, mask, group_size, epsilon,
                               beta))
    return cases


def _grpo_value(case: _Rollouts, *, ddof=1, std_epsilon=STD_EPSILON, centre="group",
                spread="group", clip=True, pick=torch.minimum, policy_sign=-1.0,
                old="old", kl="k3", kl_sign=1.0, average="sequence", negated=False) -> float:
    """GRPO's loss in float64 with one likely mistake, or none (ddof and std_epsilon: the right
    forms of the groups' standard deviation)."""
    logprobs, reference = case.logprobs.double(), case.reference_logprobs.double()
    mask = case.mask.double()
    groups = case.rewards.double().view(-1, case.group_size)
    means = {"group": groups.mean(1, keepdim=True), "batch": groups.mean()}
    stds = {"group": groups.std(1, keepdim=True, correction=ddof),
            "batch": groups.std(correction=ddof), "none": None}
    advantages = groups - means[centre]
    if stds[spread] is not None:
        advantages = advantages / (stds[spread] + std_epsilon)
    advantages = advantages.flatten()[:, None]
    ratio = torch.exp(logprobs - (case.old_logprobs.double() if old == "old" else reference))
    clipped = torch.clamp(ratio, 1 - case.epsilon, 1 + case.epsilon) if clip else ratio
    log_ratio = reference - logprobs if kl == "k3" else logprobs - reference
    per_token = (policy_sign * pick(ratio * advantages, clipped * advantages)
                 + kl_sign * case.beta * (torch.exp(log_ratio) - log_ratio - 1))
    width = mask.shape[1]
    loss = {"sequence": lambda: ((per_token * mask).sum(-1) / mask.sum(-1)).mean(),
            "padding": lambda: ((per_token * mask).sum(-1) / width).mean(),
            "everything": lambda: per_token.mean(),
            "tokens": lambda: (per_token * mask).sum() / mask.sum()}[average]().item()
    return -loss if negated else loss


def _grpo_right(case: _Rollouts, value: float) -> bool:
    """Whether `value` is GRPO's loss with the groups' standard deviation taken either way (n
    or n - 1) and any small constant up to TRL's added to it."""
    for ddof in (0, 1):
        low, high = sorted(_grpo_value(case, ddof=ddof, std_epsilon=e) for e in (1e-8, STD_EPSILON))
        tolerance = _ABS + _REL * max(abs(low), abs(high))
        if low - tolerance <= value <= high + tolerance:
            return True
    return False


_PADDING = ("your mean over each completion's tokens counts the padding: divide each "
            "completion's sum by its own number of tokens, where the mask is 1.")
_GRPO_MISTAKES = [
    (dict(spread="none"),
     "your advantages are not divided by their group's spread (standard deviation): GRPO scales "
     "each group so that every prompt pushes with the same strength, whatever its rewards' "
     "scale."),
    (dict(centre="batch", spread="batch"),
     "your advantages are normalised over the whole batch: GRPO compares each completion with "
     "the other completions of its own prompt (group_size consecutive ones), so that an easy "
     "prompt's completions are not all better than average."),
    (dict(spread="batch"),
     "your advantages are centred on their group but divided by the whole batch's spread: "
     "GRPO divides each group by its own."),
    (dict(clip=False),
     "your ratio is never clipped: then one step can move a token's probability as far as its "
     "advantage pushes it. The clip keeps it within epsilon of the policy that sampled it."),
    (dict(pick=torch.maximum),
     "you keep the larger of the clipped and the unclipped term: the objective keeps the more "
     "pessimistic one, so that clipping can only take an incentive away, never add one."),
    (dict(average="padding"), _PADDING),
    (dict(average="everything"),
     "your mean over the tokens takes in the padding's positions (and their values): only the "
     "tokens where the mask is 1 belong to a completion."),
    (dict(average="tokens"),
     "you averaged over all the completion tokens of the batch at once (the token-level mean "
     "of DAPO): GRPO averages over each completion's own tokens first, then over the "
     "completions, so that each completion counts the same."),
    (dict(kl_sign=0.0),
     "your loss has no KL term: with beta above 0, beta times the estimate of the KL "
     "divergence to the reference is added to every token's loss, to keep the policy near it."),
    (dict(kl_sign=-1.0),
     "your KL term has the wrong sign: subtracted, it rewards drifting away from the "
     "reference instead of holding the policy near it."),
    (dict(kl="reversed"),
     "your KL estimate has its log-ratio the wrong way round: the estimator of KL(policy || "
     "reference) exponentiates the reference's log-prob minus the policy's."),
    (dict(old="reference"),
     "your ratio compares the policy with the reference: the clipped ratio is to the policy "
     "that sampled the completions (old_logprobs); the reference enters only the KL term."),
    (dict(policy_sign=1.0),
     "your policy term has the wrong sign: lowering your loss would make the completions that "
     "beat their group less likely, and those that fell short more likely."),
    (dict(negated=True),
     "your value is the objective with its sign flipped: you returned what training "
     "maximises; an optimizer minimises, so return its negative."),
]


def _grpo_hint(case: _Rollouts, value: float) -> str:
    for switches, text in _GRPO_MISTAKES:
        if any(_close(value, _grpo_value(case, ddof=ddof, **switches)) for ddof in (0, 1)):
            return text
    return ("Try each step on one group: the advantages (mean 0 and spread 1 within the group), "
            "the ratio and its clip, the KL term, the mean over each completion's tokens, then "
            "over the completions.")


@exercise(fallback=grpo_loss_reference,
          fallback_name="llmlab.course.checks.lab10.grpo_loss_reference")
def exercise_grpo_loss(grpo_loss_fn) -> None:
    """Exercise 3: grpo_loss(logprobs, old_logprobs, reference_logprobs, rewards, mask,
    group_size, epsilon, beta) -> the loss, from per-token log-probs (completions, tokens), one
    reward per completion (groups of group_size consecutive completions) and the mask (1 on the
    completion's tokens, 0 on the padding)."""
    name = _GRPO
    for case in _grpo_cases():
        rows, width = case.mask.shape
        call_text = (f"grpo_loss(<per-token log-probs of {rows} completions, {width} positions, "
                     f"padding after the shorter ones>, rewards={case.rewards.tolist()}, "
                     f"group_size={case.group_size}, epsilon={case.epsilon}, beta={case.beta})")
        got = call_or_fail(name, call_text, grpo_loss_fn, *(t.clone() for t in case[:5]),
                           case.group_size, case.epsilon, case.beta)
        value = _one_loss(name, call_text, got, rows, "completion")
        equal_group = bool((case.rewards.view(-1, case.group_size).std(1) == 0).any())
        _not_finite(name, call_text, value,
                    "A group whose completions all earned the same reward has a spread of 0: "
                    "what keeps its advantages finite (they should be 0)?" if equal_group else "")
        if _grpo_right(case, value):
            continue
        expected = grpo_loss_reference(*(t.double() for t in case[:5]), case.group_size,
                                       case.epsilon, case.beta).item()
        raise ExerciseFailed(f"{name}: {call_text} returned {value:.6g}; GRPO's loss is "
                             f"{expected:.6g}. {_grpo_hint(case, value)}".strip())
    passed(name, "llmlab's GRPO loss on groups of 0/1 rewards (one group all right) and of "
                 "graded rewards, with padding after the shorter completions")


NOTEBOOK = "10_post_training.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "dpo_loss": exercise_dpo_loss,
    "grpo_loss": exercise_grpo_loss,
}
