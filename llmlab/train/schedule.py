"""Learning-rate schedules: a pure function of the step, so resuming needs no scheduler state."""

import math

from llmlab.train.config import TrainConfig


def learning_rate(step: int, config: TrainConfig) -> float:
    """The learning rate for optimizer step `step` (0-based)."""
    if config.schedule == "constant":
        return config.lr
    if config.schedule == "cyclical":
        # Triangular cycles between lr * min_lr_ratio and lr (Smith, 2017): no warm-up needed,
        # the low end of each cycle plays that role.
        position = (step % config.cycle_steps) / config.cycle_steps
        low = config.lr * config.min_lr_ratio
        return low + (config.lr - low) * (1 - abs(2 * position - 1))
    # Linear warm-up: Adam's early moment estimates are noisy, so big first steps can diverge.
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    # Then a half cosine from lr down to lr * min_lr_ratio at max_steps.
    decay_steps = max(1, config.max_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / decay_steps)
    low = config.lr * config.min_lr_ratio
    return low + 0.5 * (config.lr - low) * (1 + math.cos(math.pi * progress))


def schedule_curve(config: TrainConfig) -> list[float]:
    """The learning rate at every step of a run (for the schedule plot)."""
    return [learning_rate(step, config) for step in range(config.max_steps)]
