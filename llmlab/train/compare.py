"""Short training runs side by side: what one switch does to speed, memory and the loss."""

import dataclasses
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from llmlab.memory.measure import measure_training_step
from llmlab.train.config import TrainConfig
from llmlab.train.loop import BatchSource, Trainer


@dataclass
class QuickRun:
    name: str
    step_ms: float  # median over the steps after the first `warmup_steps`
    tokens_per_s: float
    losses: list[float]
    peak_memory_mb: float | None  # one measured step (llmlab.memory); None when not measured

    @property
    def final_loss(self) -> float:
        return self.losses[-1]


def quick_runs(
    make_model: Callable[[], torch.nn.Module],
    make_data: Callable[[TrainConfig], BatchSource],
    base: TrainConfig,
    variants: Mapping[str, dict],
    *,
    timing_warmup: int = 2,
    measure_memory: bool = True,
) -> list[QuickRun]:
    """Train a fresh model for each variant (`base` with the variant's changes) and summarise.

    The first `timing_warmup` steps are left out of the timing: they pay for allocation and,
    with compile=True, for compilation (reported separately by the first step's time).
    """
    runs = []
    for name, changes in variants.items():
        config = dataclasses.replace(base, log_interval=1, progress=False, **changes)
        if config.max_steps <= timing_warmup:
            raise ValueError(f"{name}: max_steps must exceed timing_warmup={timing_warmup}")
        trainer = Trainer(make_model(), config, make_data(config))
        history = trainer.fit().history
        step_s = statistics.median(m.step_seconds for m in history[timing_warmup:])
        memory = None
        if measure_memory:
            inputs, _ = make_data(config).next_batch()
            step = measure_training_step(
                trainer.model, trainer.optimizer, inputs.to(trainer.device), trainer.precision.dtype
            )
            memory = step.peak_bytes / 2**20
        runs.append(
            QuickRun(
                name,
                step_s * 1e3,
                trainer.tokens_per_step / step_s,
                [m.loss for m in history],
                memory,
            )
        )
    return runs


def runs_table(runs: list[QuickRun], baseline: str | None = None) -> str:
    """A plain-text table; speed-ups are relative to `baseline` (default: the first run)."""
    base = next(r for r in runs if r.name == (baseline or runs[0].name))
    lines = [
        f"{'variant':<28} {'ms/step':>8} {'tokens/s':>9} {'speed':>6} {'peak MB':>8} "
        f"{'last loss':>9}"
    ]
    for run in runs:
        memory = "-" if run.peak_memory_mb is None else f"{run.peak_memory_mb:.0f}"
        lines.append(
            f"{run.name:<28} {run.step_ms:8.1f} {run.tokens_per_s:9,.0f} "
            f"{base.step_ms / run.step_ms:5.2f}x {memory:>8} {run.final_loss:9.3f}"
        )
    return "\n".join(lines)
