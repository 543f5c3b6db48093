"""A GRPO step's memory, measured phase by phase beside its plan: Lab 02's planner extended for
GRPO (llmlab.memory.estimate_grpo_memory), as Lab 08 set fine-tuning's measured step beside its
plan (llmlab.train.finetune.finetune_memory).

The step is grpo_step itself, each phase watched by Lab 02's tensor tracker: every storage the
phase makes, counted until Python frees it, on top of the weights (the policy's and the
reference's) and the optimizer's states. What a phase makes is all "activations" to the tracker
(the KV cache, the logits of the scoring passes, the update's activations and temporaries),
except the gradients, which it recognises.
"""

import copy
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from llmlab.device import dtype_name
from llmlab.memory import (
    GRPO_PHASES,
    GRPOMemoryEstimate,
    MemoryTracker,
    TrainingSetup,
    estimate_grpo_memory,
)
from llmlab.models import model_shape
from llmlab.posttrain.grpo import grpo_optimizer, grpo_step


@dataclass(frozen=True)
class MeasuredGRPOStep:
    """Bytes by category (llmlab.memory.measure's) at the peak of each phase of a GRPO step."""

    peaks: dict[str, dict[str, int]]  # phase ("generation", "scoring", "update") -> its peak

    def phase_peak(self, phase: str) -> int:
        return sum(self.peaks[phase].values())

    @property
    def peak_phase(self) -> str:
        return max(self.peaks, key=self.phase_peak)

    @property
    def peak_bytes(self) -> int:
        return self.phase_peak(self.peak_phase)


def _completion_length(number: int, text: str) -> float:
    """A reward for a measurement: memory does not depend on the rewards' values."""
    return float(len(text))


def grpo_memory(
    policy: nn.Module,
    tokenizer,
    prompts: Sequence[str],
    *,
    group_size: int,
    max_new_tokens: int,
    stop_id: int,
    updates_per_rollout: int = 2,
    seed: int = 0,
) -> tuple[MeasuredGRPOStep, GRPOMemoryEstimate]:
    """A GRPO step of a copy of `policy` on `prompts` (each sampled `group_size` times), with a
    frozen copy as the reference, measured after a warm-up step (the optimizer makes its states
    there), and its plan: estimate_grpo_memory of the same rollouts. The plan takes the
    completions to run to `max_new_tokens`: pick a `stop_id` the policy seldom writes.

    The prompts must all be one length in tokens: sample_groups samples each length apart, and
    the plan takes all rollouts as sampled together."""
    lengths = {len(tokenizer(prompt).input_ids) for prompt in prompts}
    if len(lengths) != 1:
        raise ValueError(f"the prompts are {sorted(lengths)} tokens long: give prompts of one "
                         "length (sample_groups samples each length apart)")
    policy = copy.deepcopy(policy)  # the step trains it: the caller's model stays as it was
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    optimizer = grpo_optimizer(policy, lr=1e-5)
    both = nn.ModuleDict({"policy": policy, "reference": reference})  # weights, all of them
    step = dict(group_size=group_size, max_new_tokens=max_new_tokens, stop_id=stop_id,
                updates_per_rollout=updates_per_rollout)
    chosen = range(len(prompts))
    grpo_step(policy, reference, optimizer, tokenizer, prompts, chosen, _completion_length,
              seed=seed, **step)
    trackers = {phase: MemoryTracker(both, optimizer) for phase in GRPO_PHASES}
    grpo_step(policy, reference, optimizer, tokenizer, prompts, chosen, _completion_length,
              seed=seed + 1, watch=trackers, **step)
    measured = MeasuredGRPOStep({phase: tracker.peak for phase, tracker in trackers.items()})
    # The policy trains in its own dtype (no autocast, no master weights), as grpo_step does.
    setup = TrainingSetup(dtype=dtype_name(next(policy.parameters()).dtype), master_weights=False)
    plan = estimate_grpo_memory(model_shape(policy), setup, rollouts=len(prompts) * group_size,
                                prompt_tokens=lengths.pop(), completion_tokens=max_new_tokens,
                                updates_per_rollout=updates_per_rollout)
    return measured, plan
