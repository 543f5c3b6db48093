"""What each kind of parallelism sends, and how long a pipeline idles: the planner's arithmetic.

Every formula of communication lives here, once: the planner (llmlab.scale.simulate) prices
them, and the ranks' code (llmlab.distributed) checks the bytes it counts against them.

Bytes a rank sends, for a tensor of S bytes on N ranks with the ring algorithms NCCL and gloo use
(each ring phase is N-1 steps of one S/N message):
  all-reduce      2 (N-1)/N S   (2 phases: a reduce-scatter, then an all-gather)
  reduce-scatter    (N-1)/N S   (1 phase; S: the full input)
  all-gather        (N-1)/N S   (1 phase; S: the full output)
  broadcast         (N-1)/N S   (on average: N-1 ranks each receive S, passed along a chain)

Per step, for Psi parameters:
  DP    PyTorch's DDP one all-reduce of the gradients; ZeRO-1 adds a broadcast of the updated
        weights; FSDP2/ZeRO-3 gathers the weights twice and reduce-scatters the gradients
        (`ddp_bytes`, `zero1_bytes`, `fsdp_bytes`, what Lab 04 counts); the planner's ZeRO-1/2
        is the ZeRO paper's reduce-scatter + all-gather (`dp_collectives`);
  TP    every block all-reduces its activations twice in forward, twice in backward
        (`tensor_parallel_bytes`, Megatron-LM);
  EP    each MoE layer's tokens travel to the ranks holding their experts and back, twice more
        in backward (`expert_parallel_bytes`);
  PP    one micro-batch's activations per message (`activation_bytes`), and the stages idle
        while the pipe fills and drains (`bubble_fraction`).
"""

import math

from llmlab.memory import DTYPE_BYTES
from llmlab.models import ModelShape
from llmlab.scale.layout import Parallel

DTYPE = "bf16"  # weights, activations and gradients on the wire, in the planner
RING_FACTOR = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0, "broadcast": 1.0}
PHASES = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}  # ring phases of N-1 steps


def ring_bytes(kind: str, nbytes: float, world_size: int) -> float:
    """Bytes one rank sends for a collective over `nbytes` (the full tensor), ring algorithm."""
    return RING_FACTOR[kind] * (world_size - 1) / world_size * nbytes


# ------------------------------------------------- data parallel, as PyTorch's strategies send it


def ddp_bytes(parameters: int, world_size: int, bytes_per_value: int = 4) -> float:
    """DDP: one all-reduce of every gradient per step: 2 (N-1)/N * Psi * bytes."""
    return ring_bytes("all_reduce", parameters * bytes_per_value, world_size)


def zero1_bytes(parameters: int, world_size: int, bytes_per_value: int = 4) -> float:
    """PyTorch's ZeRO-1: DDP's all-reduce of the gradients, then each rank broadcasts the
    parameters it updated: 3 (N-1)/N * Psi * bytes, 1.5x DDP. (The ZeRO paper's stage 1 uses a
    reduce-scatter and an all-gather instead, the same bytes as DDP; ZeroRedundancyOptimizer
    keeps DDP's all-reduce.)"""
    return ddp_bytes(parameters, world_size, bytes_per_value) + ring_bytes(
        "broadcast", parameters * bytes_per_value, world_size
    )


def fsdp_bytes(parameters: int, world_size: int, bytes_per_value: int = 4) -> float:
    """ZeRO-3 / FSDP2 with reshard_after_forward: all-gather the weights in forward, again in
    backward, reduce-scatter the gradients: 3 (N-1)/N * Psi * bytes, 1.5x DDP."""
    return ring_bytes("all_gather", 2 * parameters * bytes_per_value, world_size) + ring_bytes(
        "reduce_scatter", parameters * bytes_per_value, world_size
    )


# ------------------------------------------------------------ data parallel, as the planner sees it


def dp_collectives(parameters: float, zero: int, accumulation: int = 1) -> list[tuple[str, float]]:
    """(kind, full tensor bytes) of the data-parallel traffic of one step, for `parameters`
    held (unsharded) by one GPU: 16-bit gradients and weights."""
    nbytes = parameters * DTYPE_BYTES[DTYPE]
    if zero == 0:
        return [("all_reduce", nbytes)]
    if zero in (1, 2):  # the ZeRO paper's traffic: as much as one all-reduce
        return [("reduce_scatter", nbytes), ("all_gather", nbytes)]
    return [("all_gather", nbytes), ("all_gather", nbytes), ("reduce_scatter", nbytes)] * (
        accumulation)


def dp_bytes(parameters: float, dp: int, zero: int, accumulation: int = 1) -> float:
    """Bytes one GPU sends for data parallelism in a step."""
    collectives = dp_collectives(parameters, zero, accumulation)
    return sum(ring_bytes(kind, nbytes, dp) for kind, nbytes in collectives)


# ----------------------------------------------------------------------------- tensor parallel


def tensor_parallel_bytes(
    batch: int, seq: int, d_model: int, n_layer: int, tp: int, dtype_bytes: int = 4
) -> dict[str, float]:
    """What tensor parallelism hands to all-reduce in one forward and backward pass, per rank:
    per block, attention's and the MLP's row-parallel outputs in the forward pass and the
    gradients of their column-parallel inputs in the backward pass, each batch x seq x d_model;
    and the bytes a ring all-reduce then makes each rank send."""
    all_reduced = 4 * n_layer * batch * seq * d_model * dtype_bytes
    return {"all_reduce": all_reduced, "sent": ring_bytes("all_reduce", all_reduced, tp)}


def tp_bytes(shape: ModelShape, p: Parallel, seq: int) -> float:
    """Bytes one GPU sends for tensor parallelism in a step: Lab 04's count for a forward and
    backward of the stage's blocks (`tensor_parallel_bytes`), per micro-batch."""
    layers = math.ceil(shape.n_layer / p.pp)
    one_pass = tensor_parallel_bytes(p.micro_batch, seq, shape.d_model, layers, p.tp,
                                     DTYPE_BYTES[DTYPE])["sent"]
    recomputed = 1.5 if p.checkpointing else 1.0  # the recomputed forward all-reduces 2 more
    return one_pass * recomputed * p.accumulation


# ----------------------------------------------------------------------------- expert parallel


def expert_parallel_bytes(
    tokens: int, top_k: int, hidden: int, ep: int, dtype_bytes: int = 4
) -> dict[str, float]:
    """What one MoE layer's forward pass makes a rank send under expert parallelism, when the
    routing is balanced: each of its `tokens` goes to `top_k` experts, spread evenly over the
    `ep` ranks, so (ep-1)/ep of the tokens x top_k x hidden values leave the rank on dispatch,
    and as many outputs come back on combine. (Backward sends the same again, the other way.)"""
    dispatch = tokens * top_k * hidden * dtype_bytes * (ep - 1) / ep
    return {"dispatch": dispatch, "combine": dispatch, "sent": 2 * dispatch}


# --------------------------------------------------------------------------- pipeline parallel


def activation_bytes(shape: ModelShape, p: Parallel, seq: int) -> float:
    """One micro-batch's hidden states: what a pipeline stage passes on."""
    return p.micro_batch * seq * shape.d_model * DTYPE_BYTES[DTYPE]


def bubble_fraction(stages: int, microbatches: int) -> float:
    """The share of a step each stage idles while the pipe fills and drains, if every
    micro-batch takes the same time on every stage."""
    return (stages - 1) / (microbatches + stages - 1)
