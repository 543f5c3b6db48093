"""Short training runs side by side: what one switch does to speed, memory and the loss."""

import dataclasses
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from llmlab.memory.measure import measure_training_step
from llmlab.tables import markdown_table
from llmlab.train.config import TrainConfig
from llmlab.train.loop import BatchSource, Trainer
from llmlab.units import MB


@dataclass
class QuickRun:
    name: str
    step_ms: float  # median over the steps after the first `timing_warmup` (of rounds: median)
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
    `rounds` > 1 the variants run in turn, that many times (A B A B ...), and each keeps the
    median of its rounds (`merge_rounds`): a busy spell of the machine then slows every variant
    alike instead of one. `make_val` gives each run validation batches for a final loss.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    all_rounds = []
    for round_number in range(rounds):
        memory = measure_memory and round_number == 0  # memory does not vary between rounds
        all_rounds.append([
            _quick_run(name, make_model, make_data, make_val,
                       dataclasses.replace(base, log_interval=1, progress=False, **changes),
                       timing_warmup, memory)
            for name, changes in variants.items()
        ])
    return merge_rounds(all_rounds)


def merge_rounds(rounds: list[list[QuickRun]]) -> list[QuickRun]:
    """One run per variant from several rounds of the same variants: the median step time of
    the rounds; losses, memory and the first step from the first round."""
    merged = []
    for first, *others in zip(*rounds, strict=True):
        step_ms = statistics.median(run.step_ms for run in (first, *others))
        tokens_per_step = first.tokens_per_s * first.step_ms / 1e3
        tokens_per_s = tokens_per_step / (step_ms / 1e3)
        merged.append(dataclasses.replace(first, step_ms=step_ms, tokens_per_s=tokens_per_s))
    return merged


def rounds_text(count: int) -> str:
    """'the 3 rounds', or 'its one round'."""
    return "its one round" if count == 1 else f"the {count} rounds"


def round_lines(rounds: list[list[QuickRun]]) -> str:
    """Each variant's step time in every round, a line each: how far its median could move."""
    width = max(len(run.name) for run in rounds[0])
    return "\n".join(
        f"{run.name:>{width}}: {', '.join(f'{r[i].step_ms:.0f}' for r in rounds)} ms/step in "
        f"{rounds_text(len(rounds))}"
        for i, run in enumerate(rounds[0])
    )


def faster_in_every_round(rounds: list[list[QuickRun]], fast: int, slow: int) -> bool:
    """Whether variant number `fast` was quicker than variant number `slow` beyond their spread:
    its slowest round under the other's fastest. Otherwise the rounds overlap, and a difference
    of medians may be the machine's noise."""
    return max(r[fast].step_ms for r in rounds) < min(r[slow].step_ms for r in rounds)


def _quick_run(name, make_model, make_data, make_val, config, timing_warmup, measure_memory):
    if config.max_steps <= timing_warmup:
        raise ValueError(f"{name}: max_steps must exceed timing_warmup={timing_warmup}")
    val_data = make_val(config) if make_val is not None else None
    trainer = Trainer(make_model(), config, make_data(config), val_data)
    result = trainer.fit()
    step_s = statistics.median(m.step_seconds for m in result.history[timing_warmup:])
    return QuickRun(
        name,
        step_ms=step_s * 1e3,
        tokens_per_s=trainer.tokens_per_step / step_s,
        losses=[m.loss for m in result.history],
        peak_memory_mb=_peak_memory_mb(trainer, make_data(config)) if measure_memory else None,
        first_step_ms=result.history[0].step_seconds * 1e3,
        val_loss=result.val_loss,
    )


def _peak_memory_mb(trainer: Trainer, data: BatchSource) -> float:
    """The peak of one more training step, every tensor it allocates counted (llmlab.memory)."""
    inputs, _ = data.next_batch()
    step = measure_training_step(
        trainer.model, trainer.optimizer, inputs.to(trainer.device), trainer.precision.dtype
    )
    return step.peak_bytes / MB


def runs_table(runs: list[QuickRun], baseline: str | None = None) -> str:
    """A table for the terminal; speed-ups are relative to `baseline` (default: the first run)."""
    if not runs:
        raise ValueError("no runs to show: pass at least one QuickRun")
    names = [run.name for run in runs]
    baseline = names[0] if baseline is None else baseline
    if baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not one of the runs: pass one of {names}")
    base = runs[names.index(baseline)]
    return markdown_table([{
        "variant": run.name,
        "ms/step": f"{run.step_ms:.1f}",
        "tokens/s": f"{run.tokens_per_s:,.0f}",
        "speed": f"{base.step_ms / run.step_ms:.2f}x",
        "peak MB": "-" if run.peak_memory_mb is None else f"{run.peak_memory_mb:.0f}",
        "last loss": f"{run.final_loss:.3f}",
    } for run in runs], aligned=True)
