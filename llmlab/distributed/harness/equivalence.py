"""Is a parallel strategy the same training as one process? Train K steps both ways and compare.

The check CS336 uses for DDP, for every strategy: the same initial weights, the same GLOBAL batch
at every step; on N ranks each rank takes its 1/N slice of it. Each rank's loss is the mean over
its slice, and the strategy averages the gradients over the ranks, so the gradient is the mean
over the global batch, as in one process. After K optimizer steps the parameters must agree up
to floating-point summation order. Remove the strategy's communication and they must not.
(Memory per rank is measured separately: `llmlab.distributed.harness.rank_memory`.)

Other strategies (tensor, pipeline parallel) reuse `reference_parameters`, `global_batches` and
`parameters_error` with their own per-rank step.
"""

import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from llmlab.distributed.data_parallel import (
    full_parameters,
    make_optimizer,
    register_comm_hook,
    split_batch,
    unwrap,
    wrap_model,
)
from llmlab.distributed.harness.comm import count_collectives, drop_collectives
from llmlab.distributed.launch import launch
from llmlab.memory.optimizers import REFERENCE_OPTIMIZERS
from llmlab.models import ModelShape, build_model, next_token_loss, preset
from llmlab.numerics import relative_error
from llmlab.scale.comm_cost import ddp_bytes, fsdp_bytes, zero1_bytes

# The smoke model, made small enough that 5 steps on 2 ranks take seconds: the "tiny" preset's
# 4 blocks with a 512-token vocabulary and 32-token context.
SMOKE_SHAPE = preset("tiny", vocab_size=512, context=32)
# What each strategy's own communication is, so a check can show what removing it breaks.
REMOVABLE = {"ddp": ("all_reduce",), "zero1": ("all_reduce", "broadcast"),
             "fsdp": ("reduce_scatter",)}
TARGETS = {"ddp": 1e-6, "zero1": 1e-5, "fsdp": 1e-5}  # relative; summation order stays inside


@dataclass(frozen=True)
class EquivalenceResult:
    """One strategy on N ranks against one process, after `steps` optimizer steps."""

    strategy: str
    nprocs: int
    steps: int
    max_rel_error: float  # the largest ||p - p_ref|| / ||p_ref|| over parameters and ranks
    step_seconds: float  # median seconds per optimizer step on rank 0
    reference_step_seconds: float  # the same for one process on the global batch
    bytes_sent_per_rank: float  # counted, per step (rank 0)
    bytes_formula: float  # what the strategy's formula says, per step
    dropped: str | None = None  # the collective removed (None: the real strategy)
    comm_hook: str = "allreduce"  # how DDP sent its gradients (see register_comm_hook)

    @property
    def target(self) -> float:
        return TARGETS[self.strategy]

    @property
    def passed(self) -> bool:
        return self.max_rel_error <= self.target


def global_batches(steps: int, global_batch: int, shape: ModelShape, seed: int = 0):
    """`steps` batches of random token ids, (steps, global_batch, context + 1): the same on
    every rank and in the reference run (a seeded generator, not the global RNG)."""
    generator = torch.Generator().manual_seed(seed)
    size = (steps, global_batch, shape.context + 1)
    return torch.randint(0, shape.vocab_size, size, generator=generator)


def loss_on(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the rows of `tokens` (each row: inputs, then one more)."""
    return next_token_loss(model, tokens[:, :-1], tokens[:, 1:])


def parameters_error(params: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    """The largest relative error of any parameter against the reference's: 0 for the same
    weights."""
    return max(relative_error(params[name], ref) for name, ref in reference.items())


def reference_optimizer(parameters, name: str = "sgd-momentum") -> torch.optim.Optimizer:
    """The plain (unsharded) optimizer of the comparisons (REFERENCE_OPTIMIZERS says why SGD)."""
    optimizer_class, options = REFERENCE_OPTIMIZERS[name]
    return optimizer_class(parameters, **options)


def reference_parameters(
    batches: torch.Tensor, shape: ModelShape = SMOKE_SHAPE, optimizer: str = "sgd-momentum"
) -> tuple[dict[str, torch.Tensor], float]:
    """One process trains on every batch: (its parameters, median seconds per step)."""
    model = build_model(shape, seed=0)
    optimizer = reference_optimizer(model.parameters(), optimizer)
    seconds = _train(model, optimizer, batches)
    return full_parameters(model), seconds


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: torch.Tensor) -> float:
    """An optimizer step on each batch; the median seconds per step."""
    times = []
    for tokens in batches:
        start = time.perf_counter()
        loss_on(model, tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def formula_bytes(strategy: str, model: nn.Module, world_size: int) -> float:
    """Bytes per step per rank that the strategy's formula predicts (fp32 gradients)."""
    params = _numel(model)
    if strategy == "ddp":
        return ddp_bytes(params, world_size)
    if strategy == "zero1":
        return zero1_bytes(params, world_size)
    return fsdp_bytes(params, world_size)


def _optimizer(model: nn.Module, strategy: str, name: str) -> torch.optim.Optimizer:
    optimizer_class, options = REFERENCE_OPTIMIZERS[name]
    return make_optimizer(model, strategy, optimizer_class=optimizer_class, **options)


def _numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())  # a tied weight is counted once


def _rank_run(strategy, batches, shape, optimizer_name, reference, drop, comm_hook) -> dict:
    """The body of each rank: train on its slice of every global batch, compare, report."""
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = split_batch(batches.shape[1], rank, world)
    model = build_model(shape, seed=0)
    formula = formula_bytes(strategy, model, world)
    wrapped = wrap_model(model, strategy)
    if strategy in ("ddp", "zero1"):
        # DDP's built-in all-reduce is invisible to Python; the same all-reduce as a Python hook
        # is what lets count_collectives see (and drop_collectives remove) it.
        register_comm_hook(wrapped, comm_hook)
    optimizer = _optimizer(unwrap(wrapped), strategy, optimizer_name)
    counted = []
    for tokens in batches:
        # Dropping inside counting: a removed collective is not counted as sent.
        with count_collectives() as counter, drop_collectives(drop) if drop else nullcontext():
            seconds = _train(wrapped, optimizer, tokens[None, rows])
        counted.append((seconds, counter.sent_bytes))
    params = full_parameters(wrapped)
    return {
        "error": parameters_error(params, reference),
        "seconds": statistics.median(s for s, _ in counted),
        "bytes": counted[-1][1],
        "formula": formula,
    }


def compare_to_single_process(
    strategy: str,
    nprocs: int = 2,
    steps: int = 5,
    global_batch: int = 4,
    shape: ModelShape = SMOKE_SHAPE,
    optimizer: str = "sgd-momentum",
    drop: str | None = None,
    comm_hook: str = "allreduce",
    timeout_s: float = 120,
) -> EquivalenceResult:
    """Train `steps` steps of `shape` under `strategy` on `nprocs` ranks and on one process,
    with the same global batches; return how far apart the parameters end up.

    optimizer: "sgd-momentum" (0.9) or "adamw" (see REFERENCE_OPTIMIZERS for why SGD is the
        default).
    drop: a collective to remove from the strategy (see REMOVABLE), to show that the check
    fails without it: `compare_to_single_process("ddp", drop="all_reduce").passed` is False.
    comm_hook: for "ddp"/"zero1", how the gradients are sent: "fp16" or "powersgd" compress
    them (fewer bytes, a larger error; see register_comm_hook).
    """
    if strategy not in REMOVABLE:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(REMOVABLE)}")
    if drop is not None and drop not in REMOVABLE[strategy]:
        raise ValueError(
            f"{strategy} has no {drop!r} to remove: its communication is {REMOVABLE[strategy]}"
        )
    if comm_hook != "allreduce" and strategy == "fsdp":
        raise ValueError("comm hooks are DDP's: use strategy 'ddp' or 'zero1' with comm_hook")
    if optimizer not in REFERENCE_OPTIMIZERS:
        names = ", ".join(REFERENCE_OPTIMIZERS)
        raise ValueError(f"unknown optimizer {optimizer!r}: use one of {names}")
    split_batch(global_batch, 0, nprocs)  # a batch that does not split fails here, not in a rank
    batches = global_batches(steps, global_batch, shape)
    reference, reference_seconds = reference_parameters(batches, shape, optimizer)
    args = (strategy, batches, shape, optimizer, reference, drop, comm_hook)
    ranks = launch(_rank_run, nprocs, args=args, timeout_s=timeout_s)
    return EquivalenceResult(
        strategy=strategy,
        nprocs=nprocs,
        steps=steps,
        max_rel_error=max(r["error"] for r in ranks),
        step_seconds=ranks[0]["seconds"],
        reference_step_seconds=reference_seconds,
        bytes_sent_per_rank=ranks[0]["bytes"],
        bytes_formula=ranks[0]["formula"],
        dropped=drop,
        comm_hook=comm_hook,
    )
