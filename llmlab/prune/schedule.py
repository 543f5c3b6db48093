"""Gradual pruning: how sparse the model should be at each training step.

Zhu & Gupta (2017), "To prune, or not to prune", eq. 1: from step t0, every dt steps, n times,
    s_t = s_f + (s_i - s_f) * (1 - (t - t0) / (n * dt))**3
The cubic prunes fast while many redundant weights remain and slowly near the end, when each
removal hurts more and the network needs steps to recover.
"""

from llmlab.prune.masks import check_sparsity


def cubic_sparsity(
    step: int,
    final_sparsity: float,
    start_step: int,
    end_step: int,
    initial_sparsity: float = 0.0,
    every: int = 1,
) -> float:
    """Target sparsity at `step`: 0 before start_step (dense), initial_sparsity at start_step,
    final_sparsity from end_step on; in between, updated every `every` steps and held."""
    final_sparsity = check_sparsity(final_sparsity)
    initial_sparsity = check_sparsity(initial_sparsity)
    if initial_sparsity > final_sparsity:
        raise ValueError(
            f"initial_sparsity {initial_sparsity} is above final_sparsity {final_sparsity}: "
            "gradual pruning only removes weights"
        )
    if not 0 <= start_step < end_step:
        raise ValueError(f"need 0 <= start_step < end_step, got {start_step} and {end_step}")
    if every < 1:
        raise ValueError(f"every must be at least 1 step, got {every}")
    if step < start_step:
        return 0.0
    if step >= end_step:
        return final_sparsity
    # The last pruning step at or before `step` (t0 + k dt): the sparsity is held in between.
    pruned_at = start_step + (step - start_step) // every * every
    remaining = 1 - (pruned_at - start_step) / (end_step - start_step)
    return final_sparsity + (initial_sparsity - final_sparsity) * remaining**3


def pruning_steps(start_step: int, end_step: int, every: int = 1) -> list[int]:
    """The steps at which the cubic schedule's target changes (where to prune)."""
    if every < 1 or not 0 <= start_step < end_step:
        raise ValueError(f"need 0 <= start_step < end_step and every >= 1, got "
                         f"{start_step}, {end_step}, {every}")
    return [*range(start_step, end_step, every), end_step]
