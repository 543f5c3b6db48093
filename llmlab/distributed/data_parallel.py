"""The data-parallel family: every rank holds the whole model (or a shard of it) and its own slice
of the batch; gradients are averaged so every rank takes the same optimizer step.

- "ddp":   DistributedDataParallel. Weights, gradients and optimizer states replicated; one
           all-reduce of the gradients per step, overlapped with the backward pass (buckets).
- "zero1": DDP plus ZeroRedundancyOptimizer: each rank keeps the AdamW states of 1/N of the
           parameters, updates only those, then broadcasts them (ZeRO stage 1).
- "fsdp":  FSDP2 `fully_shard` on each transformer block, then on the root: weights, gradients
           and optimizer states sharded (ZeRO stage 3). A block's weights are all-gathered just
           before it runs and freed after; gradients are reduce-scattered.
- "none":  one process, the model as it is (the reference the others are checked against).
"""

from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from llmlab.models.blocks import transformer_blocks

# Each strategy's ZeRO stage: what it shards, as llmlab.scale's Parallel and llmlab.memory count it.
ZERO_STAGE = {"ddp": 0, "zero1": 1, "fsdp": 3}
STRATEGIES = tuple(ZERO_STAGE)
COMM_HOOKS = ("allreduce", "fp16", "bf16", "powersgd")


def check_strategy(strategy: str) -> None:
    known = (*STRATEGIES, "none")
    if strategy not in known:
        raise ValueError(f"unknown parallel strategy {strategy!r}: use one of {', '.join(known)}")


def _require_group(strategy: str) -> None:
    """A clear error when the strategy needs a process group and there is none."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"strategy {strategy!r} needs a process group: run under torchrun "
            "(torchrun --nproc_per_node 2 ...) or inside llmlab.distributed.launch, or use "
            "strategy='none' for one process"
        )


def split_batch(global_batch: int, rank: int, world_size: int) -> slice:
    """The rows of a global batch that `rank` trains on: equal, contiguous slices.

    Equal slices matter: each rank's loss is a mean over its rows, and averaging N such means
    equals the mean over the global batch only when every rank has the same number of rows.
    """
    if global_batch % world_size:
        raise ValueError(
            f"a global batch of {global_batch} sequences does not split evenly over "
            f"{world_size} processes: use a batch that is a multiple of {world_size} "
            f"(for example {global_batch - global_batch % world_size or world_size})"
        )
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size} processes")
    rows = global_batch // world_size
    return slice(rank * rows, (rank + 1) * rows)


def wrap_model(
    model: nn.Module, strategy: str, *, reshard_after_forward: bool = True, **ddp_options
) -> nn.Module:
    """The model as the strategy trains it. "fsdp" shards `model` in place and returns it;
    "ddp"/"zero1" return a DistributedDataParallel wrapper (the model is its `.module`).

    ddp_options go to DistributedDataParallel, e.g. bucket_cap_mb=25 (the bucket size in MB).
    """
    check_strategy(strategy)
    if strategy == "none":
        return model
    _require_group(strategy)
    if strategy == "fsdp":
        for block in transformer_blocks(model):
            # One all-gather per block: only one block's full weights exist at a time.
            fully_shard(block, reshard_after_forward=reshard_after_forward)
        return fully_shard(model, reshard_after_forward=reshard_after_forward)
    device = next(model.parameters()).device
    device_ids = [device.index] if device.type == "cuda" else None  # one GPU per process
    return DistributedDataParallel(model, device_ids=device_ids, **ddp_options)


def make_optimizer(
    model: nn.Module,
    strategy: str,
    params: Iterable | None = None,
    optimizer_class: type[torch.optim.Optimizer] = torch.optim.AdamW,
    **options,
) -> torch.optim.Optimizer:
    """AdamW (or `optimizer_class`) for the wrapped model: sharded over the ranks for "zero1",
    plain otherwise (FSDP's parameters are already shards, so a plain AdamW keeps only this
    rank's states).

    params: parameters or parameter groups (default: all of the model's parameters).
    options: lr, betas, weight_decay, ... as the optimizer class takes them.
    """
    check_strategy(strategy)
    params = list(model.parameters() if params is None else params)
    if strategy != "zero1":
        return optimizer_class(params, **options)
    _require_group(strategy)
    return ZeroRedundancyOptimizer(params, optimizer_class=optimizer_class, **options)


def register_comm_hook(model: DistributedDataParallel, kind: str = "allreduce", **powersgd):
    """Change how DDP communicates its gradient buckets.

    "allreduce": the default all-reduce, as a Python hook (so `llmlab.distributed.harness.comm` can
    count its bytes: DDP's built-in path calls C++ directly); "fp16"/"bf16": cast each bucket to 16
    bits before the all-reduce (half the bytes); "powersgd": send a rank-r factorisation of each
    gradient matrix (powersgd: matrix_approximation_rank=1, start_powerSGD_iter=2, ...).
    Returns the hook's state (PowerSGD keeps its error feedback there).
    """
    if not isinstance(model, DistributedDataParallel):
        raise TypeError("comm hooks belong to DDP: wrap the model with strategy 'ddp' first")
    if kind not in COMM_HOOKS:
        raise ValueError(f"unknown comm hook {kind!r}: use one of {', '.join(COMM_HOOKS)}")
    if kind == "bf16" and dist.get_backend() != "nccl":
        raise ValueError(
            "bf16 compression is a CUDA feature (NCCL 2.10+): the gloo backend cannot all-reduce "
            "bf16; use kind='fp16' on CPUs, or run on GPUs with NCCL"
        )
    state, hook = None, {
        "allreduce": default_hooks.allreduce_hook,
        "fp16": default_hooks.fp16_compress_hook,
        "bf16": default_hooks.bf16_compress_hook,
    }.get(kind)
    if kind == "powersgd":
        # Error feedback adds what compression dropped to the next step's gradient.
        options = {"matrix_approximation_rank": 1, "start_powerSGD_iter": 2, **powersgd}
        state = powerSGD_hook.PowerSGDState(process_group=None, **options)
        hook = powerSGD_hook.powerSGD_hook
        if dist.get_backend() == "gloo":
            hook = _one_bucket_at_a_time(hook)
    model.register_comm_hook(state, hook)
    return state


def _one_bucket_at_a_time(hook):
    """gloo needs every rank to issue its collectives in the same order. PowerSGD issues its
    second all-reduce from a callback of the first, so with several buckets in flight two ranks
    can interleave them differently and gloo aborts; waiting for the previous bucket's
    communication before starting the next one keeps a single order."""
    previous = []

    def serial_hook(state, bucket):
        if previous:
            previous.pop().wait()
        future = hook(state, bucket)
        previous.append(future)
        return future

    return serial_hook


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DDP wrapper (FSDP2 shards the model itself, so it is returned as is)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def full_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter, whole and on the CPU, by name: FSDP2 shards are all-gathered (a
    collective, so every rank must call this)."""
    full = {}
    for name, param in unwrap(model).named_parameters():
        tensor = param.full_tensor() if hasattr(param, "full_tensor") else param
        full[name] = tensor.detach().cpu().clone()
    return full
