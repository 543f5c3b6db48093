"""DeepSpeed ZeRO-2 and ZeRO-3 against one plain PyTorch process, on the same steps.

Every rank builds the same model, hands it to `deepspeed.initialize` with the config that
`deepspeed_config` writes from a `TrainingSetup`, and trains on its slice of the same global
batches. DeepSpeed averages the gradients over the ranks, so after K steps the parameters must
match one process that trained on the whole global batch with torch's AdamW and the same
clipping, up to the order of floating-point sums.

Runs on CPUs (DeepSpeed's CPU accelerator over gloo) and on GPUs (NCCL).
"""

import importlib.util
import os
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from llmlab.distributed.deepspeed_config import deepspeed_config
from llmlab.distributed.launch import launch
from llmlab.memory import MemoryTracker, TrainingSetup, estimate_memory
from llmlab.models import ModelShape, build_model, count_parameters, preset

# The smoke model, shrunk so 5 steps on 2 CPU ranks take seconds: 2 blocks of width 128,
# a 1024-token vocabulary and 64-token sequences (0.5M parameters).
SMOKE_SHAPE = preset("tiny", n_layer=2, d_model=128, vocab_size=1024, context=64)
TARGET = 1e-4  # the tolerance for DeepSpeed, relative
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
    """The set-up these runs use: fp32, eager attention (the planner's textbook case on a CPU)."""
    if global_batch % nprocs:
        raise ValueError(
            f"a global batch of {global_batch} does not split over {nprocs} ranks: "
            "use a multiple of the number of processes"
        )
    return TrainingSetup(batch=global_batch // nprocs, seq=shape.context, dtype="fp32",
                         attention="eager", zero=stage, gpus=nprocs)  # fmt: skip


def global_batches(steps: int, global_batch: int, shape: ModelShape, seed: int = 0):
    """(steps, global_batch, context + 1) random token ids, the same in every process."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, shape.vocab_size, (steps, global_batch, shape.context + 1),
                         generator=generator)  # fmt: skip


def loss_on(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the rows of `tokens`."""
    logits = model(tokens[:, :-1]).logits
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


def relative_error(params: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    """max over parameters of ||p - p_ref|| / ||p_ref||: 0 for the same weights."""
    return max(((params[n] - ref).norm() / ref.norm()).item() for n, ref in reference.items())


def torch_optimizer(config: dict, params) -> torch.optim.Optimizer:
    """The torch.optim optimizer a DeepSpeed config's optimizer block describes."""
    options = dict(config["optimizer"]["params"])
    options.pop("torch_adam", None)  # DeepSpeed's own switches, not the optimizer's
    adamw = options.pop("adam_w_mode", True)
    name = config["optimizer"]["type"]
    classes = {"AdamW": torch.optim.AdamW, "Adam": torch.optim.AdamW if adamw else torch.optim.Adam,
               "SGD": torch.optim.SGD}  # fmt: skip
    return classes[name](params, **options)


def train_alone(config: dict, shape: ModelShape, batches: torch.Tensor, attention: str):
    """Plain PyTorch on every row: the config's optimizer from torch.optim, and its clipping.
    Returns (parameters by name, median seconds per step)."""
    model = build_model(shape, attention=attention, seed=0)
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


def train_with_deepspeed(config: dict, shape: ModelShape, batches: torch.Tensor, attention: str):
    """One rank's run inside a process group (from `launch` or torchrun): DeepSpeed on this
    rank's slice of each global batch. Returns its parameters (whole, gathered from the shards
    under ZeRO-3), peak tensor bytes and median seconds per step."""
    deepspeed = import_deepspeed()
    rank, world = dist.get_rank(), dist.get_world_size()
    per_rank = batches.shape[1] // world
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    model = build_model(shape, attention=attention, seed=0)
    # Entered before DeepSpeed copies the weights into its flat buffers, so it sees them all.
    with MemoryTracker(model) as tracker:
        engine, *_ = deepspeed.initialize(model=model, config=config)
        for tokens in batches[:TRACKED_STEPS]:
            _deepspeed_step(engine, tokens[rows])
    times = [_deepspeed_step(engine, tokens[rows]) for tokens in batches[TRACKED_STEPS:]]
    # ZeRO-3 keeps 1/N of each weight per rank; gather them to compare the whole model.
    with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
        params = {name: p.detach().clone() for name, p in engine.module.named_parameters()}
    engine.destroy()
    return {"params": params, "peak_bytes": sum(tracker.peak.values()),
            "seconds": statistics.median(times) if times else float("nan")}  # fmt: skip


def _deepspeed_step(engine, tokens: torch.Tensor) -> float:
    start = time.perf_counter()
    loss = loss_on(engine, tokens.to(engine.device))
    engine.backward(loss)  # DeepSpeed's backward: reduces (and shards) the gradients
    engine.step()  # clip, optimizer step on this rank's shard, share the new weights
    return time.perf_counter() - start


def _train_slice_alone(config: dict, shape: ModelShape, batches: torch.Tensor, attention: str):
    """The broken twin of `train_with_deepspeed`: each rank trains on its slice with no
    communication at all. What data parallelism without its gradient reduction computes."""
    rank, world = dist.get_rank(), dist.get_world_size()
    per_rank = batches.shape[1] // world
    own = batches[:, rank * per_rank : (rank + 1) * per_rank]
    params, seconds = train_alone(config, shape, own, attention)
    return {"params": params, "peak_bytes": float("nan"), "seconds": seconds}


def deepspeed_extra_bytes(shape: ModelShape, setup: TrainingSetup) -> dict[str, float]:
    """Bytes per rank DeepSpeed keeps beyond what `estimate_memory` plans, measured here:

    - its fp32 master copy of the rank's shard, made even when training in fp32 (the planner
      counts master weights only for mixed precision, where they are a real second copy);
    - under ZeRO-3, the rank's flat gradient shard, kept allocated between steps.
    """
    shard = count_parameters(shape).total / setup.data_parallel
    extras = {}
    if setup.zero and setup.dtype == "fp32":
        extras["fp32 copy of the weight shard"] = 4 * shard
    if setup.zero == 3:
        extras["flat gradient shard, kept between steps"] = 4 * shard if setup.dtype == "fp32" \
            else 2 * shard  # fmt: skip
    return extras


@dataclass(frozen=True)
class DeepSpeedResult:
    """DeepSpeed ZeRO-`stage` on N ranks against one process, after `steps` optimizer steps."""

    stage: int
    nprocs: int
    steps: int
    max_rel_error: float  # the largest ||p - p_ref|| / ||p_ref|| over parameters and ranks
    step_seconds: float  # median seconds per optimizer step, rank 0
    reference_step_seconds: float  # the same for one process on the global batch
    peak_bytes: tuple[float, ...]  # each rank's peak of live tensor bytes, measured
    planned_peak_bytes: float  # estimate_memory's peak for the same set-up
    extra_bytes: dict[str, float]  # what DeepSpeed keeps beyond the plan (deepspeed_extra_bytes)
    communicating: bool = True  # False: the broken twin without gradient reduction

    @property
    def passed(self) -> bool:
        return self.max_rel_error <= TARGET

    @property
    def memory_ratio(self) -> float:
        """The largest measured peak over the plan with DeepSpeed's extras: 1.0 is exact."""
        return max(self.peak_bytes) / (self.planned_peak_bytes + sum(self.extra_bytes.values()))


def compare_deepspeed(
    stage: int,
    nprocs: int = 2,
    steps: int = 5,
    global_batch: int = 4,
    shape: ModelShape = SMOKE_SHAPE,
    optimizer: str = "sgd-momentum",
    communicating: bool = True,
    timeout_s: float = 180,
) -> DeepSpeedResult:
    """Train `steps` steps of `shape` with DeepSpeed ZeRO-`stage` (2 or 3) on `nprocs` ranks
    and in one plain process, with the same global batches; return how far apart they end up.

    communicating=False runs the broken twin (each rank alone on its slice) to show that the
    comparison catches training without gradient reduction.

    optimizer: SGD with momentum (lr 0.1) by default, as in `llmlab.distributed.equivalence`:
    Adam divides each gradient by its running RMS, so a gradient that is pure rounding noise
    (GPT-2's key bias: softmax ignores a constant added to all of a query's scores, its true
    gradient is 0) becomes a full lr-sized step, and summed in another order on 2 ranks the
    noise differs. "adamw" (lr 1e-3) ends 3e-4 apart on that bias, 1e-6 elsewhere.
    """
    if stage not in (2, 3):
        raise ValueError(f"stage must be 2 or 3 (ZeRO-1: llmlab's zero1 strategy): {stage!r}")
    setup = smoke_setup(stage, nprocs, global_batch, shape).replace(optimizer=optimizer)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    lr = 0.1 if optimizer.startswith("sgd") else 1e-3
    config = deepspeed_config(setup, shape, lr=lr, device=device)
    batches = global_batches(steps, global_batch, shape)
    reference, reference_seconds = train_alone(config, shape, batches, setup.attention)
    rank_fn = train_with_deepspeed if communicating else _train_slice_alone
    ranks = launch(rank_fn, nprocs, args=(config, shape, batches, setup.attention),
                   timeout_s=timeout_s)  # fmt: skip
    return DeepSpeedResult(
        stage=stage,
        nprocs=nprocs,
        steps=steps,
        max_rel_error=max(relative_error(r["params"], reference) for r in ranks),
        step_seconds=ranks[0]["seconds"],
        reference_step_seconds=reference_seconds,
        peak_bytes=tuple(r["peak_bytes"] for r in ranks),
        planned_peak_bytes=estimate_memory(shape, setup).peak,
        extra_bytes=deepspeed_extra_bytes(shape, setup),
        communicating=communicating,
    )
