"""Does communication overlap with compute? DDP bucket sizes and FSDP2 prefetching, measured.

On 2 gloo ranks, a model big enough that buckets matter (the "small" preset, 6 blocks of width
384, with a 512-token vocabulary and 32-token context: about 11 M parameters, 43 MB of fp32
gradients): per configuration, the median step time (the slower rank's), the collectives per step
and the bytes each rank sends per step, against llmlab.scale.comm_cost's formula.

- DDP with `bucket_cap_mb` from 0.25 to 100: small buckets start the all-reduce early (while
  backward still computes the earlier layers' gradients) but pay a per-call latency each; one
  huge bucket waits for the whole backward and overlaps nothing. The bytes do not change.
- FSDP2 (`fully_shard` per block): prefetching the next blocks' all-gathers, or not, and
  `reshard_after_forward=False` (no second all-gather, 1/3 fewer bytes, more memory).

Step times are with DDP's built-in (C++) all-reduce; the collectives are counted on one more
step of a fresh model with the same all-reduce as a Python hook (count_collectives cannot see
the C++ path). benchmarks/overlap.py runs the whole sweep; Lab 05 the DDP part.
"""

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist

from llmlab.distributed.data_parallel import (
    make_optimizer,
    register_comm_hook,
    split_batch,
    unwrap,
    wrap_model,
)
from llmlab.distributed.harness.comm import count_collectives
from llmlab.distributed.harness.equivalence import global_batches, loss_on
from llmlab.distributed.launch import launch
from llmlab.models import build_model, preset, transformer_blocks
from llmlab.scale.comm_cost import ddp_bytes, fsdp_bytes
from llmlab.tables import markdown_table
from llmlab.units import MB

SHAPE = preset("small", vocab_size=512, context=32)
GLOBAL_BATCH = 4  # sequences per step over all ranks
BUCKETS_MB = (0.25, 1.0, 5.0, 25.0, 100.0)  # 25: DDP's default
PREFETCH_DEPTH = 2  # blocks gathered ahead in the explicit-prefetch row
FSDP_ROWS = {  # label: (reshard_after_forward, prefetch)
    "FSDP2 default prefetch": (True, "default"),
    f"FSDP2 prefetch {PREFETCH_DEPTH} ahead": (True, "explicit"),
    "FSDP2 no bwd prefetch": (True, "none"),
    "FSDP2 no reshard": (False, "default"),
}


@dataclass(frozen=True)
class Row:
    config: str
    step_seconds: float  # median over the timed steps, the slower rank
    fastest_seconds: float  # the fastest timed step, the slower rank (less hit by other work)
    calls: dict[str, int]  # collectives per step, by kind
    sent_bytes: float  # per rank per step, counted
    formula_bytes: float  # what llmlab.scale.comm_cost's formula says


def _prefetch(model: torch.nn.Module, mode: str) -> None:
    """Set FSDP2's all-gather prefetching on the blocks: "default" leaves FSDP2's own (the next
    block in backward), "explicit" gathers the next PREFETCH_DEPTH blocks in both passes,
    "none" turns backward prefetch off (each block's all-gather waits until it is needed)."""
    blocks = transformer_blocks(model)
    for i, block in enumerate(blocks):
        if mode == "explicit":
            block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 1 + PREFETCH_DEPTH])
            block.set_modules_to_backward_prefetch(blocks[max(0, i - PREFETCH_DEPTH) : i][::-1])
        elif mode == "none":
            block.set_modules_to_backward_prefetch([])


def _build(strategy: str, options: dict, comm_hook: bool):
    model = build_model(SHAPE, seed=0)
    prefetch = options.pop("prefetch", "default")
    wrapped = wrap_model(model, strategy, **options)
    if strategy == "fsdp":
        _prefetch(wrapped, prefetch)
    elif comm_hook:
        register_comm_hook(wrapped, "allreduce")  # a Python all-reduce, so it can be counted
    # SGD with momentum: AdamW's extra work would only dilute the communication in the step.
    optimizer = make_optimizer(unwrap(wrapped), strategy, optimizer_class=torch.optim.SGD,
                               lr=0.01, momentum=0.9)
    return wrapped, optimizer


def _step(model, optimizer, tokens: torch.Tensor) -> float:
    dist.barrier()  # every rank starts the clock together
    start = time.perf_counter()
    loss_on(model, tokens).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def _rank_run(strategy: str, options: dict, steps: int, warmup: int) -> dict:
    """On each rank: time `steps` steps after `warmup` untimed ones, then count one step's
    collectives (on a fresh model for DDP, whose counting needs the Python hook)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    batches = global_batches(warmup + steps + 2, GLOBAL_BATCH, SHAPE)[:, split_batch(
        GLOBAL_BATCH, rank, world)]
    model, optimizer = _build(strategy, dict(options), comm_hook=False)
    times = [_step(model, optimizer, tokens) for tokens in batches[: warmup + steps]]
    if strategy == "ddp":
        model, optimizer = _build(strategy, dict(options), comm_hook=True)
        _step(model, optimizer, batches[-2])  # DDP rebuilds its buckets after the first step
    with count_collectives() as counter:
        _step(model, optimizer, batches[-1])
    calls: dict[str, int] = {}
    for call in counter.calls:
        calls[call.kind] = calls.get(call.kind, 0) + 1
    params = sum(p.numel() for p in build_model(SHAPE, seed=0).parameters())
    formula = ddp_bytes(params, world) if strategy == "ddp" else fsdp_bytes(params, world)
    return {"seconds": statistics.median(times[warmup:]), "fastest": min(times[warmup:]),
            "calls": calls,
            "bytes": counter.sent_bytes, "formula": formula}


def _row(label: str, options: dict, ranks: list[dict]) -> Row:
    # Without a reshard, the backward all-gather is skipped: the formula's 3x becomes 2x.
    formula = ranks[0]["formula"] * (2 / 3 if options.get("reshard_after_forward") is False else 1)
    return Row(label, max(r["seconds"] for r in ranks), max(r["fastest"] for r in ranks),
               ranks[0]["calls"], ranks[0]["bytes"], formula)


def measure(label: str, strategy: str, options: dict, steps: int, warmup: int) -> Row:
    """One configuration on 2 fresh ranks (`launch`)."""
    ranks = launch(partial(_rank_run, strategy, options, steps, warmup), nprocs=2)
    return _row(label, options, ranks)


def ddp_bucket_sweep(caps_mb: Sequence[float] = BUCKETS_MB, steps: int = 3,
                     warmup: int = 1) -> list[Row]:
    """On every rank of a running group (`launch(ddp_bucket_sweep, 2, args=(...))`): one row per
    DDP bucket size, every rank's numbers gathered so each row holds the slower rank's time."""
    if steps < 1 or warmup < 1:
        raise ValueError("need steps >= 1 and warmup >= 1 (DDP builds its buckets in step 1)")
    rows = []
    for cap in caps_mb:
        mine = _rank_run("ddp", {"bucket_cap_mb": cap}, steps, warmup)
        ranks = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, mine)
        rows.append(_row(f"DDP bucket_cap_mb={cap:g}", {}, ranks))
        if dist.get_rank() == 0:  # one line per size: what a launcher's progress bar counts
            print(f"{rows[-1].config} measured", flush=True)
    return rows


def table(rows: list[Row]) -> str:
    """The rows as text: step times, collectives per step by kind, MB sent and the formula's."""
    return markdown_table([
        {"configuration": row.config, "step ms": f"{row.step_seconds * 1e3:.1f}",
         "fastest": f"{row.fastest_seconds * 1e3:.1f}",
         "all-red": row.calls.get("all_reduce", 0), "all-gath": row.calls.get("all_gather", 0),
         "red-scat": row.calls.get("reduce_scatter", 0),
         "sent MB": f"{row.sent_bytes / MB:.2f}", "formula": f"{row.formula_bytes / MB:.2f}"}
        for row in rows], aligned=True)


