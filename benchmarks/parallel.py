"""Every parallel strategy against one process, in one run: the table of Lab 04.

    python benchmarks/parallel.py [--nprocs 2] [--steps 5] [--only ddp,deepspeed-zero2,...]

For each strategy, on `nprocs` CPU processes over gloo (one math thread each), the smoke model
trains `steps` optimizer steps on the same global batches as one process, and the table shows:
- the largest relative parameter error after the steps, against its target;
- memory per rank, measured by Lab 02's tensor tracker, against `llmlab.memory`'s plan;
- bytes sent per rank in a step, counted at the collectives, against the strategy's formula;
- the step time, and the speed against one process (on 2 shared CPU cores, communication and
  Python overhead dominate the smoke model: a speed-up needs real GPUs and a real model).

Each strategy runs in the harness its module provides (see the "harness" notes under the table).
Needs the llmlab package importable (`pip install -e .` from the repository root).
"""

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch.distributed as dist

from llmlab.distributed import launch
from llmlab.distributed.harness.deepspeed_run import compare_deepspeed, deepspeed_available
from llmlab.distributed.harness.equivalence import (
    SMOKE_SHAPE,
    compare_to_single_process,
    parameters_error,
    reference_parameters,
)
from llmlab.distributed.harness.model_parallel import token_batches, train_tensor_parallel
from llmlab.distributed.harness.pipeline import train_pipeline
from llmlab.distributed.harness.rank_memory import measure_rank_memory
from llmlab.memory import TrainingSetup, estimate_memory, measure
from llmlab.scale.comm_cost import ring_bytes, tensor_parallel_bytes
from llmlab.tables import markdown_table

MB = 1e6  # the course's MB: 10^6 bytes


@dataclass(frozen=True)
class Row:
    strategy: str
    error: float  # max relative parameter error after the steps
    target: float
    measured_bytes: float | None  # memory per rank, measured (None: not measurable here)
    planned_bytes: float | None
    sent_bytes: float | None  # per rank per step, counted
    formula_bytes: float | None
    step_seconds: float
    reference_step_seconds: float  # one process, the same global batch
    note: str = ""


def single_process(nprocs: int, steps: int) -> list[Row]:
    """The reference every other row compares with (its time is the DDP harness's reference)."""
    ddp = compare_to_single_process("ddp", nprocs=nprocs, steps=steps)
    seconds = ddp.reference_step_seconds
    setup = TrainingSetup(batch=4, dtype="fp32", optimizer="sgd-momentum")  # the global batch
    measured = measure(SMOKE_SHAPE, setup).peak_bytes
    planned = estimate_memory(SMOKE_SHAPE, setup).peak
    return [Row("1 process", 0.0, 0.0, measured, planned, 0.0, 0.0, seconds, seconds,
                "the reference: the whole global batch in one process")]


def data_parallel(nprocs: int, steps: int) -> list[Row]:
    """DDP, ZeRO-1 and FSDP2 (llmlab.distributed.harness.equivalence and rank_memory)."""
    rows = []
    for strategy, label in [("ddp", "DDP"), ("zero1", "ZeRO-1"), ("fsdp", "FSDP2 (ZeRO-3)")]:
        result = compare_to_single_process(strategy, nprocs=nprocs, steps=steps)
        memory = measure_rank_memory(strategy, nprocs=nprocs)
        # FSDP2's peak is not measurable by the tracker (see rank_memory): its model states are.
        item = "peak" if "peak" in memory.measured else None
        measured = memory.measured[item] if item else _states(memory.measured)
        planned = memory.planned[item] if item else _states(memory.planned)
        note = "" if item else "memory: weights+gradients+optimizer states, not the peak"
        rows.append(Row(label, result.max_rel_error, result.target, measured, planned,
                        result.bytes_sent_per_rank, result.bytes_formula, result.step_seconds,
                        result.reference_step_seconds, note))
    return rows


def _states(items: dict[str, float]) -> float:
    return items["weights"] + items["gradients"] + items["optimizer states"]


def _marginal_step(train, steps: int, **options):
    """On this rank (inside `launch`): run `train` for 1 step, then for `steps`; the difference
    is `steps - 1` steps without the set-up both share (building the model, the mesh). A first
    1-step run pays the one-time costs (caches, first calls) outside the clock.
    Returns the longer run's result and the seconds per step."""
    train(steps=1, **options)
    times = []
    for n in (1, steps):
        dist.barrier()  # every rank starts the clock together
        start = time.perf_counter()
        result = train(steps=n, **options)
        times.append(time.perf_counter() - start)
    return result, (times[1] - times[0]) / (steps - 1)


def model_parallel(nprocs: int, steps: int) -> list[Row]:
    """Tensor parallel over all ranks (model_parallel) and one pipeline stage per rank (pipeline),
    on equivalence's smoke model, batches of 8 x 32 tokens and plain SGD."""
    batch, seq = 8, SMOKE_SHAPE.context
    reference, reference_seconds = reference_parameters(
        token_batches(SMOKE_SHAPE, steps, batch, seq), SMOKE_SHAPE, "sgd-momentum")
    timed = launch(partial(_marginal_step, train_tensor_parallel, steps, tp=nprocs, batch=batch,
                           seq=seq), nprocs)
    runs, seconds = [run for run, _ in timed], max(seconds for _, seconds in timed)
    handed = runs[0].comm_bytes.get("all_reduce", 0)  # one forward and backward pass
    formula = tensor_parallel_bytes(batch, seq, SMOKE_SHAPE.d_model, SMOKE_SHAPE.n_layer, nprocs)
    rows = [Row(f"TP {nprocs}", max(parameters_error(r.params, reference) for r in runs), 1e-5,
                None, None, ring_bytes("all_reduce", handed, nprocs), formula["sent"], seconds,
                reference_seconds, "activations all-reduced; memory not measured here")]
    stages = launch(partial(train_pipeline, steps=steps, batch=batch, seq=seq), nprocs)
    whole = {name: p for stage in stages for name, p in stage.params.items()}
    rows.append(Row(f"PP {nprocs} (GPipe)", parameters_error(whole, reference), 1e-5, None, None,
                    None, None, max(stage.step_seconds for stage in stages), reference_seconds,
                    "sends activations point to point (not counted); memory not measured"))
    return rows


def deepspeed(nprocs: int, steps: int) -> list[Row]:
    """DeepSpeed ZeRO-2 and ZeRO-3 from llmlab's generated config (deepspeed_run)."""
    if not deepspeed_available():
        print("deepspeed is not installed: its rows are left out")
        return []
    rows = []
    for stage in (2, 3):
        result = compare_deepspeed(stage, nprocs=nprocs, steps=steps)
        rows.append(Row(f"DeepSpeed ZeRO-{stage}", result.max_rel_error, 1e-4,
                        max(result.peak_bytes), result.deepspeed_planned_bytes,
                        result.bytes_sent_per_rank, result.bytes_formula, result.step_seconds,
                        result.reference_step_seconds,
                        "memory plan: + DeepSpeed's gradient shard and fp32 copy"))
    return rows


GROUPS: dict[str, Callable[[int, int], list[Row]]] = {
    "single": single_process,
    "data-parallel": data_parallel,
    "model-parallel": model_parallel,
    "deepspeed": deepspeed,
}


def _ratio(measured: float | None, planned: float | None) -> str:
    return f"{measured / planned:.2f}" if measured is not None and planned else "-"


def _mb(value: float | None) -> str:
    return f"{value / MB:.2f}" if value is not None else "-"


def table(rows: list[Row]) -> str:
    cells = [{
        "strategy": row.strategy,
        "max rel err": f"{row.error:.1e}",
        "target": f"{row.target:.0e}" if row.target else "-",
        "mem MB": _mb(row.measured_bytes),
        "plan": _mb(row.planned_bytes),
        "mem / plan": _ratio(row.measured_bytes, row.planned_bytes),
        "sent MB": _mb(row.sent_bytes),
        "formula": _mb(row.formula_bytes),
        "sent / formula": _ratio(row.sent_bytes, row.formula_bytes),
        "step ms": f"{row.step_seconds * 1e3:.1f}",
        "speed": f"{row.reference_step_seconds / row.step_seconds:.2f}x",
        "note": row.note,
    } for row in rows]
    return "\n".join([markdown_table(cells, aligned=True), *HARNESSES])


HARNESSES = [
    "harnesses: DDP, ZeRO-1, FSDP2 and DeepSpeed train a global batch of 4 x 32 tokens with SGD",
    "  (momentum 0.9; DeepSpeed also clips at 1.0); TP and PP 8 x 32 tokens with plain SGD; the",
    "  memory of DDP, ZeRO-1 and FSDP2 is one AdamW step of 2 sequences per rank (rank_memory).",
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nprocs", type=int, default=2, help="processes per strategy (2)")
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps compared (5, >= 2)")
    parser.add_argument("--only", default=",".join(GROUPS),
                        help=f"comma-separated groups to run, of {', '.join(GROUPS)}")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.steps < 2 or args.nprocs < 2:
        raise SystemExit("need --steps >= 2 (a step time) and --nprocs >= 2 (a parallel run)")
    groups = args.only.split(",")
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        raise SystemExit(f"unknown group(s) {unknown}: use some of {', '.join(GROUPS)}")
    start = time.perf_counter()
    rows = [row for name in groups for row in GROUPS[name](args.nprocs, args.steps)]
    print(f"\n{args.nprocs} CPU processes (gloo, 1 thread each) against 1 process, "
          f"{args.steps} optimizer steps, fp32\n")
    print(table(rows))
    print(f"\n({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
