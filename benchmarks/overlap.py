"""Does communication overlap with compute? DDP bucket sizes and FSDP2 prefetching, measured.

    python benchmarks/overlap.py [--steps 10] [--warmup 2] [--repeats 2]

On 2 gloo ranks, a model big enough that buckets matter (the "small" preset, 6 blocks of width
384, with a 512-token vocabulary and 32-token context: about 11 M parameters, 43 MB of fp32
gradients), the table shows per configuration the median step time (the slower rank's), the
collectives per step and the bytes each rank sends per step (the fastest step beside the
median: on a shared machine it is the one least slowed by other work):

1. DDP with `bucket_cap_mb` from 0.25 to 100: small buckets start the all-reduce early (while
   backward still computes the earlier layers' gradients) but pay a per-call latency each;
   one huge bucket waits for the whole backward and overlaps nothing. The bytes do not change:
   every gradient is all-reduced once whatever the bucketing.
2. FSDP2 (`fully_shard` per block): the default prefetch, explicit prefetch of the next two
   blocks (`set_modules_to_forward_prefetch` / `set_modules_to_backward_prefetch`), no backward
   prefetch, and `reshard_after_forward=False` (keeps the gathered weights from forward to
   backward: no second all-gather, 1/3 fewer bytes, more memory).

What this machine can show: hardly any overlap. Each rank has one CPU core; gloo moves the bytes
on its own threads, which compete with the rank's compute for that core, so "overlapped"
communication still takes the core away from the backward pass. Expect the bucket and prefetch
rows to differ by little more than per-call overhead (many tiny buckets are slower). On GPUs
with NCCL, communication runs on its own CUDA stream and the network or NVLink, beside the
compute kernels: there the default 25 MB buckets hide most of DDP's all-reduce behind backward
(one 100 MB bucket hides none of it), and FSDP2's prefetch hides the all-gathers, so a step
costs close to compute alone until the bytes outgrow the link.

The measurement is llmlab.distributed.harness.overlap's (Lab 05 runs its DDP part). Needs the llmlab
package importable (`pip install -e .` from the repository root).
"""

import argparse
import time

from llmlab.distributed.harness.overlap import (
    BUCKETS_MB,
    FSDP_ROWS,
    GLOBAL_BATCH,
    SHAPE,
    measure,
    table,
)
from llmlab.models import build_model
from llmlab.timing import warn_if_busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per row (10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them (2)")
    parser.add_argument("--repeats", type=int, default=2, help="sweeps; the best is shown (2)")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 1 or args.repeats < 1:
        raise SystemExit(
            "need --steps, --repeats >= 1 and --warmup >= 1 (DDP builds its buckets in step 1)"
        )
    warn_if_busy()
    start = time.perf_counter()
    configs = [(f"DDP bucket_cap_mb={cap:g}", "ddp", {"bucket_cap_mb": cap}) for cap in BUCKETS_MB]
    configs += [(label, "fsdp", {"reshard_after_forward": reshard, "prefetch": mode})
                for label, (reshard, mode) in FSDP_ROWS.items()]
    # Whole sweeps, repeated: a burst of other work then slows one row of a sweep, not one
    # configuration; each row keeps its sweep with the lowest median.
    sweeps = [[measure(*config, args.steps, args.warmup) for config in configs]
              for _ in range(args.repeats)]
    rows = [min(runs, key=lambda row: row.step_seconds) for runs in zip(*sweeps, strict=True)]
    params = sum(p.numel() for p in build_model(SHAPE, seed=0).parameters())
    print(
        f"\n2 CPU ranks (gloo, 1 thread each), 'small' preset at context {SHAPE.context}, "
        f"{params / 1e6:.1f} M parameters, {GLOBAL_BATCH} sequences per step, fp32, SGD;"
    )
    print(
        f"median of {args.steps} steps after {args.warmup} warm-up, the best of "
        f"{args.repeats} sweeps; collectives per step\n"
    )
    print(table(rows))
    print("\nformula: DDP 2(N-1)/N x gradient bytes; FSDP2 3(N-1)/N (2(N-1)/N without reshard)")
    print(f"\n({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
