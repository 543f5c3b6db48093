"""The "same as one process?" harnesses: each parallel strategy run on a few ranks of the smoke
model, against one process on the same global batches, with its bytes, memory and idle time
measured. The labs and benchmarks run them; the trainer never does (its runtime is
llmlab.distributed: groups, launch, mesh, data parallel).

One concern per module:
- `comm`: count the bytes each collective sends (the formulas are llmlab.scale.comm_cost's).
- `equivalence`: DDP, ZeRO-1 and FSDP2 on N ranks against one process on the same global batch.
- `model_parallel`: tensor-parallel and 2-D (data x tensor) runs against one process.
- `pipeline`: pipeline stages under GPipe and 1F1B against one process, and their measured idle
  time (the bubble sweep) against the formula.
- `rank_memory`: memory per rank, measured, against the Lab 02 planner.
- `overlap`: DDP bucket sizes and FSDP2 prefetching, timed and counted on 2 ranks.
- `deepspeed_run`: DeepSpeed ZeRO-2/3 against one process (also `python -m` under a launcher, so
  this face does not import it: runpy warns about a module its package imported first).
"""

from llmlab.distributed.harness.comm import count_collectives, drop_collectives
from llmlab.distributed.harness.equivalence import (
    SMOKE_SHAPE,
    EquivalenceResult,
    compare_to_single_process,
    global_batches,
    parameters_error,
    reference_parameters,
)
from llmlab.distributed.harness.model_parallel import train_single_process, train_tensor_parallel
from llmlab.distributed.harness.overlap import ddp_bucket_sweep
from llmlab.distributed.harness.pipeline import bubble_sweep, train_pipeline
from llmlab.distributed.harness.rank_memory import RankMemory, measure_rank_memory, planned_memory

__all__ = [
    "count_collectives",
    "drop_collectives",
    "SMOKE_SHAPE",
    "EquivalenceResult",
    "compare_to_single_process",
    "global_batches",
    "parameters_error",
    "reference_parameters",
    "train_single_process",
    "train_tensor_parallel",
    "train_pipeline",
    "bubble_sweep",
    "RankMemory",
    "measure_rank_memory",
    "planned_memory",
    "ddp_bucket_sweep",
]
