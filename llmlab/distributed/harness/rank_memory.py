"""Memory per rank, measured with Lab 02's tracker, against `llmlab.memory`'s plan.

Each rank runs a training step of the smoke model under a strategy inside `MemoryTracker`, which
counts this rank's tensors by what they are for: for FSDP's sharded parameters it counts the local
shard, for ZeRO-1 the local optimizer's states. The plan is `estimate_memory` for the same set-up
(`zero`: 0 for DDP, 1 for ZeRO-1, 3 for FSDP; `gpus`: the ranks).

What the tracker cannot see, so is not compared:
- FSDP2 frees an all-gathered block by shrinking its storage to 0 bytes (`resize_(0)`), not by
  dropping the tensor; the tracker counts a storage's size when it is made, so it would count
  every gathered block as still alive. FSDP's peak is therefore not measured here (on a GPU,
  `torch.cuda.max_memory_allocated` sees it); its model states are.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist

from llmlab.distributed.data_parallel import (
    STRATEGIES,
    ZERO_STAGE,
    make_optimizer,
    unwrap,
    wrap_model,
)
from llmlab.distributed.harness.equivalence import SMOKE_SHAPE
from llmlab.distributed.launch import launch
from llmlab.memory import TrainingSetup, estimate_memory
from llmlab.memory.measure import measure_training_step
from llmlab.models import ModelShape, build_model
from llmlab.tables import markdown_table
from llmlab.units import MB

STATE_ITEMS = ("weights", "gradients", "optimizer states")


@dataclass(frozen=True)
class RankMemory:
    """Bytes on rank 0, measured and planned, for the items both can name."""

    strategy: str
    nprocs: int
    measured: dict[str, float]
    planned: dict[str, float]

    def relative_errors(self) -> dict[str, float]:
        """(measured - planned) / planned for each item both have."""
        return {
            name: (self.measured[name] - self.planned[name]) / self.planned[name]
            for name in self.measured
            if name in self.planned
        }

    def table(self) -> str:
        title = f"{self.strategy} on {self.nprocs} ranks, per rank"
        rows = [{title: name, "measured MB": f"{self.measured[name] / MB:.2f}",
                 "planned MB": f"{self.planned[name] / MB:.2f}", "error": f"{error:+.1%}"}
                for name, error in self.relative_errors().items()]
        return markdown_table(rows, aligned=True)


def planned_memory(strategy: str, shape: ModelShape, batch: int, nprocs: int) -> dict[str, float]:
    """The plan's model states per rank and its peak (fp32, AdamW, `batch` sequences per rank).

    On a CPU, torch's AdamW runs its per-tensor loop (its all-tensors "foreach" form is for
    GPUs): no scratch buffer the size of all the states, as for a fused optimizer.
    """
    setup = TrainingSetup(batch=batch, dtype="fp32", optimizer="adamw", fused_optimizer=True,
                          zero=ZERO_STAGE[strategy], gpus=nprocs)
    estimate = estimate_memory(shape, setup)
    planned = {name: estimate.items[name] for name in STATE_ITEMS}
    planned["peak"] = estimate.peak
    return planned


def _measure_on_rank(strategy: str, shape: ModelShape, batch: int) -> dict[str, float]:
    model = wrap_model(build_model(shape, seed=0), strategy)
    optimizer = make_optimizer(unwrap(model), strategy, lr=1e-3)
    generator = torch.Generator().manual_seed(dist.get_rank())
    tokens = torch.randint(0, shape.vocab_size, (batch, shape.context), generator=generator)
    # Its warm-up step makes the optimizer states; in the measured step's forward DDP rebuilds
    # its gradient buckets (in the order the gradients arrived), so the tracker sees them (as
    # forward-pass memory: it has no category for them).
    step = measure_training_step(model, optimizer, tokens)
    measured = {"weights": step.weights, "gradients": step.gradients,
                "optimizer states": step.optimizer_states}
    if strategy != "fsdp":  # see the module docstring
        measured["peak"] = step.peak_bytes
    return measured


def measure_rank_memory(
    strategy: str, nprocs: int = 2, batch: int = 2, shape: ModelShape = SMOKE_SHAPE
) -> RankMemory:
    """Measure one training step's memory on each of `nprocs` ranks; rank 0's against the plan."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    measured = launch(_measure_on_rank, nprocs, args=(strategy, shape, batch))[0]
    return RankMemory(strategy, nprocs, measured, planned_memory(strategy, shape, batch, nprocs))
