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
    step_ms: float  # median over the timed steps (after the first `timing_warmup`) of all rounds
    tokens_per_s: float
    losses: list[float]  # the first round's, one per step
    peak_memory_mb: float | None  # one measured step (llmlab.memory); None when not measured
    first_step_ms: float  # the first step alone: allocation and, with compile=True, compilation
    val_loss: float | None = None  # on fixed validation batches after the last step, if given

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
    rounds: int = 1,
    make_val: Callable[[TrainConfig], BatchSource] | None = None,
) -> list[QuickRun]:
    """Train a fresh model for each variant (`base` with the variant's changes) and summarise.

    The first `timing_warmup` steps are left out of the timing: they pay for allocation and,
    with compile=True, for compilation (the first step's time is reported on its own). With
    `rounds` > 1 every variant runs that many times, in turn, and the step times of all rounds
    are pooled: a busy spell of the machine then slows every variant alike, not just one.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    first_round: dict[str, QuickRun] = {}
    tokens_per_step: dict[str, int] = {}
    timed: dict[str, list[float]] = {name: [] for name in variants}
    for round_number in range(rounds):
        for name, changes in variants.items():
            config = dataclasses.replace(base, log_interval=1, progress=False, **changes)
            if config.max_steps <= timing_warmup:
                raise ValueError(f"{name}: max_steps must exceed timing_warmup={timing_warmup}")
            val_data = make_val(config) if make_val is not None else None
            trainer = Trainer(make_model(), config, make_data(config), val_data)
            result = trainer.fit()
            timed[name] += [m.step_seconds for m in result.history[timing_warmup:]]
            if round_number == 0:
                memory = _peak_memory_mb(trainer, make_data(config)) if measure_memory else None
                first_round[name] = QuickRun(
                    name,
                    step_ms=0.0,  # set below, from every round
                    tokens_per_s=0.0,
                    losses=[m.loss for m in result.history],
                    peak_memory_mb=memory,
                    first_step_ms=result.history[0].step_seconds * 1e3,
                    val_loss=result.val_loss,
                )
                tokens_per_step[name] = trainer.tokens_per_step
    runs = []
    for name, run in first_round.items():
        step_s = statistics.median(timed[name])
        runs.append(dataclasses.replace(run, step_ms=step_s * 1e3,
                                        tokens_per_s=tokens_per_step[name] / step_s))  # fmt: skip
    return runs


def _peak_memory_mb(trainer: Trainer, data: BatchSource) -> float:
    """The peak of one more training step, every tensor it allocates counted (llmlab.memory)."""
    inputs, _ = data.next_batch()
    step = measure_training_step(
        trainer.model, trainer.optimizer, inputs.to(trainer.device), trainer.precision.dtype
    )
    return step.peak_bytes / 2**20


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
