"""DeepSpeed ZeRO-2 and ZeRO-3 against one plain PyTorch process, on the same steps.

Every rank builds the same model, hands it to `deepspeed.initialize` with the config that
`deepspeed_config` writes from a `TrainingSetup`, and trains on its slice of the same global
batches (`equivalence`'s harness). DeepSpeed averages the gradients over the ranks, so after K
steps the parameters must match one process that trained on the whole global batch with the same
torch optimizer and clipping, up to the order of floating-point sums.

Runs on CPUs (DeepSpeed's CPU accelerator over gloo) and on GPUs (NCCL): from Python with
`compare_deepspeed(stage)`, or at a terminal under torchrun, as DeepSpeed is usually run:

    torchrun --nproc_per_node 2 -m llmlab.distributed.harness.deepspeed_run \\
        --stage 3 --config ds.json

or under DeepSpeed's own launcher (`--module`: run it as `python -m` would):

    deepspeed --num_gpus 2 --module llmlab.distributed.harness.deepspeed_run --stage 2
"""

import argparse
import importlib.util
import os
import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from llmlab.distributed.data_parallel import split_batch
from llmlab.distributed.deepspeed_config import deepspeed_config, write_deepspeed_config
from llmlab.distributed.groups import default_backend, process_group
from llmlab.distributed.harness.comm import count_collectives, drop_collectives
from llmlab.distributed.harness.equivalence import (
    SMOKE_SHAPE,
    global_batches,
    loss_on,
    parameters_error,
)
from llmlab.distributed.launch import launch
from llmlab.memory import MemoryTracker, TrainingSetup, estimate_memory
from llmlab.models import ModelShape, build_model, count_parameters
from llmlab.scale.comm_cost import fsdp_bytes, zero1_bytes
from llmlab.units import MB

TARGET = 1e-4  # relative: DeepSpeed's own bucketing and clipping reorder the sums
# Each stage's gradient reduction: what `drop` may remove to show the check catches it.
REMOVABLE = {2: ("all_reduce",), 3: ("reduce_scatter",)}
# Steps run under the memory tracker: the first creates the optimizer's state, the second is
# a steady step. The rest are timed without the tracker's bookkeeping.
TRACKED_STEPS = 2


def deepspeed_available() -> bool:
    return importlib.util.find_spec("deepspeed") is not None


def import_deepspeed():
    """Import DeepSpeed ready for training on this machine's accelerator."""
    if not torch.cuda.is_available():
        # Named, DeepSpeed takes its CPU accelerator (gloo) without warning that it found no GPU.
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import deepspeed.ops

    # DeepSpeed consults this table (filling it probes every op's compiler, noisily) only to
    # decide whether to JIT-compile a shared-memory all-reduce for CPU inference when it joins
    # the group: 40 s of C++ build that training never uses. Set first, both are skipped.
    deepspeed.ops.__compatible_ops__ = {"deepspeed_shm_comm": False}
    return deepspeed


def smoke_setup(stage: int, nprocs: int, global_batch: int, shape: ModelShape) -> TrainingSetup:
    """The set-up these runs use: fp32, SGD with momentum, the model's default (sdpa) attention."""
    split_batch(global_batch, 0, nprocs)  # a batch that does not split fails here, not in a rank
    return TrainingSetup(batch=global_batch // nprocs, seq=shape.context, dtype="fp32",
                         optimizer="sgd-momentum", zero=stage, gpus=nprocs)


def torch_optimizer(config: dict, params) -> torch.optim.Optimizer:
    """The torch.optim optimizer a DeepSpeed config's optimizer block describes."""
    options = dict(config["optimizer"]["params"])
    options.pop("torch_adam", None)  # DeepSpeed's own switches, not the optimizer's
    adamw = options.pop("adam_w_mode", True)
    classes = {"AdamW": torch.optim.AdamW, "Adam": torch.optim.AdamW if adamw else torch.optim.Adam,
               "SGD": torch.optim.SGD}
    return classes[config["optimizer"]["type"]](params, **options)


def train_alone(config: dict, shape: ModelShape, batches: torch.Tensor):
    """Plain PyTorch on every row: the config's optimizer from torch.optim, and its clipping.
    Returns (parameters by name, median seconds per step)."""
    model = build_model(shape, seed=0)
    optimizer = torch_optimizer(config, model.parameters())
    times = []
    for tokens in batches:
        start = time.perf_counter()
        loss_on(model, tokens).backward()
        if config["gradient_clipping"]:
            nn.utils.clip_grad_norm_(model.parameters(), config["gradient_clipping"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    return params, statistics.median(times)


def train_with_deepspeed(config: dict, shape: ModelShape, batches: torch.Tensor, drop=None):
    """One rank's run inside a process group (from `launch` or torchrun): DeepSpeed on this
    rank's slice of each global batch, with the collective `drop` removed if given. Returns its
    parameters (whole, gathered from the shards under ZeRO-3), its loss at each step, peak tensor
    bytes, bytes sent in a steady step and median seconds per step."""
    deepspeed = import_deepspeed()
    rows = split_batch(batches.shape[1], dist.get_rank(), dist.get_world_size())
    model = build_model(shape, seed=0)
    # Both entered before DeepSpeed starts: it keeps references to some collectives, and copies
    # the weights into its own flat buffers, and each must see those.
    with (count_collectives() as counter, drop_collectives(drop) if drop else nullcontext(),
          MemoryTracker(model) as tracker):
        engine, *_ = deepspeed.initialize(model=model, config=config)
        losses = []
        for tokens in batches[:TRACKED_STEPS]:
            sent_before = counter.sent_bytes
            losses.append(_deepspeed_step(engine, tokens[rows])[1])
        step_bytes = counter.sent_bytes - sent_before
        times = []
        for tokens in batches[TRACKED_STEPS:]:
            seconds, loss = _deepspeed_step(engine, tokens[rows])
            times.append(seconds)
            losses.append(loss)
    # ZeRO-3 keeps 1/N of each weight per rank; gather them to compare the whole model.
    with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
        # A copy on the CPU: results travel between processes, and CUDA tensors cannot.
        params = {name: p.detach().to("cpu", copy=True)
                  for name, p in engine.module.named_parameters()}
    engine.destroy()
    return {"params": params, "losses": losses, "peak_bytes": sum(tracker.peak.values()),
            "bytes": step_bytes,
            "seconds": statistics.median(times) if times else float("nan")}


def _deepspeed_step(engine, tokens: torch.Tensor) -> tuple[float, float]:
    """One optimizer step; returns (seconds, this rank's loss before the step)."""
    start = time.perf_counter()
    loss = loss_on(engine, tokens.to(engine.device))
    engine.backward(loss)  # DeepSpeed's backward: reduces (and shards) the gradients
    engine.step()  # clip, optimizer step on this rank's shard, share the new weights
    return time.perf_counter() - start, loss.item()


def deepspeed_bytes(stage: int, parameters: int, world_size: int, bytes_per_value: int = 4):
    """Bytes per step per rank DeepSpeed sends, by formula.

    ZeRO-2: DeepSpeed reduces each gradient bucket with an all-reduce (its default
    use_multi_rank_bucket_allreduce; the ZeRO paper's reduce-scatter sends half as much for the
    gradients), then all-gathers the updated weights: 3 (N-1)/N Psi bytes, as PyTorch's
    ZeRO-1. ZeRO-3:
    all-gather the weights in forward and in backward, reduce-scatter the gradients, as FSDP.
    """
    bytes_of = zero1_bytes if stage == 2 else fsdp_bytes
    return bytes_of(parameters, world_size, bytes_per_value)


def deepspeed_planned_peak(shape: ModelShape, setup: TrainingSetup) -> float:
    """`estimate_memory`'s peak, adjusted for two things DeepSpeed does, measured here:

    - it allocates the rank's flat gradient shard at its first bucket reduction, early in the
      backward pass while the activations are still alive (and under ZeRO-3 keeps it between
      steps): the planner's picture of gradients held through backward, as with accumulation;
    - it keeps an fp32 master copy of the rank's weight shard even when training in fp32 (the
      planner counts master weights only for mixed precision, where they are a second copy).
    """
    peak = estimate_memory(shape, setup.replace(grad_accumulation=2)).peak
    if setup.zero and setup.dtype == "fp32":
        peak += 4 * count_parameters(shape).total / setup.data_parallel
    return peak


@dataclass(frozen=True)
class DeepSpeedResult:
    """DeepSpeed ZeRO-`stage` on N ranks against one process, after `steps` optimizer steps."""

    stage: int
    nprocs: int
    steps: int
    max_rel_error: float  # the largest ||p - p_ref|| / ||p_ref|| over parameters and ranks
    step_seconds: float  # median seconds per step after the tracked ones, rank 0 (nan: none)
    reference_step_seconds: float  # the same for one process on the global batch
    peak_bytes: tuple[float, ...]  # each rank's peak of live tensor bytes, measured
    planned_peak_bytes: float  # estimate_memory's peak for the same set-up
    deepspeed_planned_bytes: float  # the same, adjusted for DeepSpeed (deepspeed_planned_peak)
    bytes_sent_per_rank: float  # counted in a steady step, rank 0
    bytes_formula: float  # deepspeed_bytes
    dropped: str | None = None  # the collective removed (None: the real DeepSpeed)

    @property
    def passed(self) -> bool:
        return self.max_rel_error <= TARGET

    @property
    def memory_ratio(self) -> float:
        """The largest measured peak over the plan adjusted for DeepSpeed: 1.0 is exact."""
        return max(self.peak_bytes) / self.deepspeed_planned_bytes


def compare_deepspeed(
    stage: int,
    nprocs: int = 2,
    steps: int = 5,
    global_batch: int = 4,
    shape: ModelShape = SMOKE_SHAPE,
    drop: str | None = None,
    timeout_s: float = 180,
) -> DeepSpeedResult:
    """Train `steps` steps of `shape` with DeepSpeed ZeRO-`stage` (2 or 3) on `nprocs` ranks
    and in one plain process, with the same global batches; return how far apart they end up.

    The optimizer is SGD with momentum (lr 0.1), as in `equivalence`: Adam
    divides each gradient by its running RMS, so a gradient that is pure rounding noise (GPT-2's
    key bias: softmax ignores a constant added to all of a query's scores) becomes a full
    lr-sized step, and on 2 ranks the noise differs. With AdamW (lr 1e-3) the attention biases
    end 3e-4 apart; every other parameter within 5e-6.

    drop: the stage's gradient reduction (see REMOVABLE) to remove, to show the check fails
    without it: `compare_deepspeed(2, drop="all_reduce").passed` is False.
    """
    if stage not in REMOVABLE:
        raise ValueError(f"stage must be 2 or 3 (ZeRO-1: llmlab's zero1 strategy), got {stage!r}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if drop is not None and drop not in REMOVABLE[stage]:
        raise ValueError(f"ZeRO-{stage} reduces gradients with {REMOVABLE[stage]}, not {drop!r}")
    setup = smoke_setup(stage, nprocs, global_batch, shape)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = deepspeed_config(setup, shape, lr=0.1, device=device)
    batches = global_batches(steps, global_batch, shape)
    reference, reference_seconds = train_alone(config, shape, batches)
    ranks = launch(train_with_deepspeed, nprocs, args=(config, shape, batches, drop),
                   backend=default_backend(), timeout_s=timeout_s)
    return DeepSpeedResult(
        stage=stage,
        nprocs=nprocs,
        steps=steps,
        max_rel_error=max(parameters_error(r["params"], reference) for r in ranks),
        step_seconds=ranks[0]["seconds"],
        reference_step_seconds=reference_seconds,
        peak_bytes=tuple(r["peak_bytes"] for r in ranks),
        planned_peak_bytes=estimate_memory(shape, setup).peak,
        deepspeed_planned_bytes=deepspeed_planned_peak(shape, setup),
        bytes_sent_per_rank=ranks[0]["bytes"],
        bytes_formula=deepspeed_bytes(stage, count_parameters(shape).total, nprocs),
        dropped=drop,
    )


def main(argv: list[str] | None = None) -> None:
    """Each rank trains with DeepSpeed; rank 0 then trains alone and prints the comparison."""
    parser = argparse.ArgumentParser(description="DeepSpeed ZeRO against one process")
    parser.add_argument("--stage", type=int, choices=sorted(REMOVABLE), default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--global-batch", type=int, default=4)
    parser.add_argument("--config", help="also write the generated DeepSpeed config JSON here")
    # DeepSpeed's launcher appends --local_rank=L to every process's arguments; LOCAL_RANK,
    # which it sets too, is what the process group reads.
    parser.add_argument("--local_rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if int(os.environ.get("WORLD_SIZE", 1)) < 2:
        raise SystemExit("start it with 2 or more processes: torchrun --nproc_per_node 2 -m "
                         "llmlab.distributed.harness.deepspeed_run, or deepspeed --num_gpus 2 "
                         "--module llmlab.distributed.harness.deepspeed_run")
    with process_group() as me:
        setup = smoke_setup(args.stage, me.world_size, args.global_batch, SMOKE_SHAPE)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        config = deepspeed_config(setup, SMOKE_SHAPE, lr=0.1, device=device)
        if args.config and me.is_main:
            write_deepspeed_config(config, args.config)
        batches = global_batches(args.steps, args.global_batch, SMOKE_SHAPE)
        run = train_with_deepspeed(config, SMOKE_SHAPE, batches)
        if me.is_main:
            for step, loss in enumerate(run["losses"], start=1):
                print(f"step {step} rank 0 loss {loss!r}")  # repr: every digit, to compare runs
            error = parameters_error(run["params"], train_alone(config, SMOKE_SHAPE, batches)[0])
            print(f"DeepSpeed ZeRO-{args.stage} on {me.world_size} processes, {args.steps} steps: "
                  f"max relative error {error:.1e} against one process (target {TARGET:.0e}); "
                  f"peak {run['peak_bytes'] / MB:.1f} MB per rank, "
                  f"{run['bytes'] / MB:.1f} MB sent per step")


if __name__ == "__main__":
    main()
