"""Muon with its states sharded over the ranks (ZeRO-1), against one process.

Muon orthogonalises each weight matrix's momentum as a whole (Newton-Schulz multiplies the matrix
by its own transpose), so its states can be sharded by whole matrices only. PyTorch's
ZeroRedundancyOptimizer assigns whole parameters to ranks: with Muon as its optimizer class, each
rank keeps the momentum of the matrices it owns, orthogonalises them, updates them, and broadcasts
them to the other ranks. (DeepSpeed's ZeRO and FSDP2 cut every tensor into flat slices, and a
slice of a matrix cannot be orthogonalised alone: a Muon there gathers each matrix first.)

The parameters that are not the blocks' matrices (embeddings, norms, biases) step with SGD with
momentum, sharded the same way (REFERENCE_OPTIMIZERS says why not AdamW in a check like this).
"""

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
from llmlab.distributed.harness.equivalence import (
    SMOKE_SHAPE,
    TARGETS,
    formula_bytes,
    global_batches,
    loss_on,
    parameters_error,
)
from llmlab.distributed.launch import launch
from llmlab.memory.optimizers import OPTIMIZER_STATES, REFERENCE_OPTIMIZERS
from llmlab.models import build_model, matrices_and_others

MUON_OPTIONS = {"lr": 0.02}  # torch.optim.Muon's rate for a run of a few steps (momentum 0.95)


@dataclass(frozen=True)
class ShardedMuonResult:
    """Muon on N ranks under `strategy` ("zero1": sharded; "ddp": every rank keeps every state)
    against one process, after `steps` optimizer steps."""

    strategy: str
    nprocs: int
    steps: int
    max_rel_error: float  # the largest ||p - p_ref|| / ||p_ref|| over parameters and ranks
    matrices_per_rank: tuple[int, ...]  # how many of the blocks' matrices each rank updates
    state_values_per_rank: tuple[int, ...]  # Muon's momentum values each rank keeps, counted
    state_values_formula: float  # the planner's: one buffer per matrix value, over N ranks
    bytes_sent_per_rank: float  # counted on rank 0, per step
    bytes_formula: float  # the strategy's (zero1: the gradients' all-reduce, then the broadcast)
    parameters: dict[str, torch.Tensor]  # rank 0's parameters at the end, whole
    dropped: str | None = None  # the collective removed (None: the real strategy)

    @property
    def target(self) -> float:
        return TARGETS["zero1"]

    @property
    def passed(self) -> bool:
        return self.max_rel_error <= self.target


def muon_and_sgd(model: nn.Module, strategy: str, muon_class: type[torch.optim.Optimizer]):
    """Two optimizers, sharded for "zero1": `muon_class` (torch.optim.Muon or a subclass) on the
    blocks' weight matrices, SGD with momentum on every other parameter."""
    matrices, others = matrices_and_others(model)
    sgd_class, sgd_options = REFERENCE_OPTIMIZERS["sgd-momentum"]
    return (make_optimizer(model, strategy, matrices, optimizer_class=muon_class, **MUON_OPTIONS),
            make_optimizer(model, strategy, others, optimizer_class=sgd_class, **sgd_options))


def _train(model: nn.Module, optimizers, batches: torch.Tensor) -> None:
    for tokens in batches:
        loss_on(model, tokens).backward()
        for optimizer in optimizers:
            optimizer.step()
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)


def _rank_run(strategy, batches, reference, muon_class, drop) -> dict:
    """The body of each rank: Muon on its slice of every global batch, compared and counted."""
    rows = split_batch(batches.shape[1], dist.get_rank(), dist.get_world_size())
    model = wrap_model(build_model(SMOKE_SHAPE, seed=0), "ddp")
    register_comm_hook(model, "allreduce")  # DDP's all-reduce through Python, to be counted
    muon, sgd = muon_and_sgd(unwrap(model), strategy, muon_class)
    with count_collectives() as counter, drop_collectives(drop) if drop else nullcontext():
        _train(model, (muon, sgd), batches[:, rows])
    local = getattr(muon, "optim", muon)  # ZeroRedundancyOptimizer's own share of the matrices
    parameters = full_parameters(model)
    return {
        "error": parameters_error(parameters, reference),
        "matrices": sum(len(group["params"]) for group in local.param_groups),
        "state": sum(state["momentum_buffer"].numel() for state in local.state.values()),
        "bytes": counter.sent_bytes / len(batches),
        "parameters": parameters if dist.get_rank() == 0 else None,
    }


def compare_sharded_muon(
    nprocs: int = 2,
    strategy: str = "zero1",
    steps: int = 5,
    global_batch: int = 12,
    muon_class: type[torch.optim.Optimizer] = torch.optim.Muon,
    drop: str | None = None,
    timeout_s: float = 180,
) -> ShardedMuonResult:
    """Muon (`muon_class`) on `nprocs` ranks of the smoke model, its states sharded ("zero1") or
    not ("ddp"), against one process on the same global batches.

    muon_class: torch.optim.Muon iterates in bf16, where rounding a gradient that differs in its
    last bits (summed in another order on N ranks) can land 1 % away; llmlab.train.muon.FP32Muon
    iterates in fp32 and lands within the target.
    drop: "broadcast" removes the sharded step's broadcast of the updated matrices (the check
    then fails), "all_reduce" the gradients' averaging.
    """
    if strategy not in ("zero1", "ddp"):
        raise ValueError(f"unknown strategy {strategy!r}: use 'zero1' (sharded) or 'ddp'")
    if drop not in (None, "broadcast", "all_reduce"):
        raise ValueError(f"cannot drop {drop!r}: use 'broadcast' or 'all_reduce'")
    split_batch(global_batch, 0, nprocs)  # a batch that does not split fails here, not in a rank
    batches = global_batches(steps, global_batch, SMOKE_SHAPE)
    model = build_model(SMOKE_SHAPE, seed=0)
    _train(model, muon_and_sgd(model, "none", muon_class), batches)
    reference = full_parameters(model)
    ranks = launch(_rank_run, nprocs, args=(strategy, batches, reference, muon_class, drop),
                   timeout_s=timeout_s)
    matrix_values = sum(p.numel() for p in matrices_and_others(model)[0])
    shards = nprocs if strategy == "zero1" else 1
    return ShardedMuonResult(
        strategy=strategy,
        nprocs=nprocs,
        steps=steps,
        max_rel_error=max(r["error"] for r in ranks),
        matrices_per_rank=tuple(r["matrices"] for r in ranks),
        state_values_per_rank=tuple(r["state"] for r in ranks),
        state_values_formula=OPTIMIZER_STATES["muon"] * matrix_values / shards,
        bytes_sent_per_rank=ranks[0]["bytes"],
        bytes_formula=formula_bytes(strategy, model, nprocs),
        parameters=ranks[0]["parameters"],
        dropped=drop,
    )
