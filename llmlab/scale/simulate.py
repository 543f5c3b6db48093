"""Predict a training run at scale: memory per GPU, step time, MFU, days and dollars.

One step of a layout dp x tp x pp on `Cluster`'s GPUs, with each data-parallel replica running
`accumulation` micro-batches of `micro_batch` sequences (the pipeline's micro-batches):

- memory: llmlab.memory's estimate of the most loaded pipeline stage (llmlab.scale.layout);
- compute: the step's FLOPs (with activation checkpointing, one more forward of the blocks) at
  `efficiency` x the GPU's dense bf16 peak, stretched by the pipeline bubble;
- communication: the bytes of llmlab.scale.comm_cost, alpha-beta timed (llmlab.scale.collectives),
  and what is assumed to hide:
  TP  every block all-reduces its activations 2x in forward, 2x in backward (and 2x in the
      recomputed forward): on the critical path, nothing hidden (Megatron-LM, Narayanan 2021);
  EP  every MoE layer sends each token to its top_k experts and their outputs back (two
      all-to-alls) in forward, again in backward (and in the recomputed forward), routing
      assumed balanced: not hidden (DeepSeek-V3's DualPipe overlaps them; not modelled);
  PP  each micro-batch's activations go forward and its gradients back, 1/tp per GPU (their
      scatter/gather), over (v m + p - 1) time slots each way: not hidden;
  DP  the gradients (ZeRO-1/2: reduce-scatter, then all-gather the updated weights; ZeRO-3:
      weights gathered twice and gradients reduce-scattered for every micro-batch) hide behind
      the last micro-batch's backward (ZeRO-3: behind all compute) at `overlap` x that time.
      A GPU's experts are summed over the dp / ep ranks that hold the same ones.

Or give `achieved_tflops` (an end-to-end rate per GPU, as papers report it): the step then takes
its FLOPs at that rate, and bubble and communication are already inside it.
"""

import math
from dataclasses import dataclass

from llmlab.gpu_specs import GpuSpec, gpu_names, resolve_gpu_spec
from llmlab.memory import DTYPE_BYTES, MemoryEstimate, TrainingSetup, check_tensor_parallel, fits
from llmlab.models import (
    ModelShape,
    as_shape,
    count_parameters,
    expert_parameters,
    training_flops_per_token,
)
from llmlab.scale.collectives import all_to_all_seconds, ring_seconds, send_seconds
from llmlab.scale.comm_cost import (
    DTYPE,
    PHASES,
    activation_bytes,
    bubble_fraction,
    dp_collectives,
    tp_bytes,
)
from llmlab.scale.layout import Parallel, stage_estimate
from llmlab.scale.links import link

# An assumption: the share of the dense peak a large bf16 matmul-heavy step keeps busy
# (llmlab.gpu_specs: real matmuls reach 60-80% of the datasheet peak; the rest is elementwise work).
EFFICIENCY = 0.6
SECONDS_PER_DAY = 86400


def gpu_spec(gpu: str | GpuSpec) -> GpuSpec:
    """A GPU with a bf16 peak, as llmlab.gpu_specs resolves it: by alias ("h100"), by its name in
    the table, or by its device name."""
    spec = resolve_gpu_spec(gpu)
    if spec is None or spec.tflops[DTYPE] is None:
        known = ", ".join(gpu_names(DTYPE))
        raise ValueError(f"unknown GPU {gpu!r} (or no {DTYPE} peak): use one of {known}")
    return spec


@dataclass(frozen=True)
class Cluster:
    gpu: str = "h100"
    gpus_per_node: int = 8
    nodes: int = 1
    inside_node: str = "nvlink4"  # a llmlab.scale.links preset
    between_nodes: str = "ib-ndr"
    dollars_per_gpu_hour: float = 3.0  # an assumption, as in every lab: an on-demand H100

    def __post_init__(self) -> None:
        gpu_spec(self.gpu), link(self.inside_node), link(self.between_nodes)  # named well?
        for name in ("gpus_per_node", "nodes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.dollars_per_gpu_hour >= 0:
            raise ValueError(f"dollars_per_gpu_hour must be >= 0, got {self.dollars_per_gpu_hour}")

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def link_for(self, dim: str, parallel: Parallel) -> str:
        """The link that `parallel`'s "tp", "dp", "pp" or "ep" groups are as slow as: the one
        between nodes when a group has ranks on two (in the mesh's rank order,
        llmlab.scale.layout's)."""
        crosses = parallel.crosses_nodes(dim, self.gpus_per_node)
        return self.between_nodes if crosses else self.inside_node


@dataclass(frozen=True)
class Prediction:
    parallel: Parallel
    memory: MemoryEstimate  # per GPU, most loaded stage
    fit: str  # "yes", "tight" or "no" (llmlab.memory.fits)
    tokens_per_step: int
    compute_s: float  # at the stated efficiency, without the bubble
    bubble: float  # share of the step the pipeline idles
    tp_s: float  # exposed communication per step, by dimension
    pp_s: float
    dp_s: float
    dp_total_s: float  # all of DP's communication, before overlap
    ep_s: float
    step_s: float
    mfu: float  # model FLOPs (no recompute) over the peak
    tokens: float  # tokens to train
    dollars_per_gpu_hour: float
    gpus: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def days(self) -> float:
        return self.tokens / self.tokens_per_s / SECONDS_PER_DAY

    @property
    def cost(self) -> float:
        return self.days * 24 * self.gpus * self.dollars_per_gpu_hour


def hardware_flops_per_token(model: str | ModelShape, seq: int, checkpointing: bool) -> float:
    """FLOPs the GPUs run per token: the model's 6N (+ attention, + LM head), plus one more
    forward of the blocks when they are recomputed in backward (8N: Narayanan et al. 2021)."""
    counts = training_flops_per_token(model, seq)
    recompute = (counts.blocks + counts.attention) / 3 if checkpointing else 0
    return counts.total + recompute


def simulate(
    model: str | ModelShape,
    cluster: Cluster,
    parallel: Parallel,
    tokens: float = 1e12,
    efficiency: float = EFFICIENCY,
    overlap: float = 1.0,
    achieved_tflops: float | None = None,
) -> Prediction:
    """Predict one layout (see the module docstring for what is modelled and assumed)."""
    shape, p = as_shape(model), parallel
    _check(shape, cluster, p, tokens, efficiency, overlap, achieved_tflops)
    seq = p.seq or shape.context
    spec = gpu_spec(cluster.gpu)
    memory = stage_estimate(shape, TrainingSetup(), p)
    tokens_per_step = p.dp * p.micro_batch * p.accumulation * seq
    hardware_flops = hardware_flops_per_token(shape, seq, p.checkpointing)
    flops_per_gpu = tokens_per_step * hardware_flops / p.gpus
    peak = spec.tflops[DTYPE] * 1e12
    compute_s = flops_per_gpu / (peak * efficiency)
    # Interleaving v chunks per GPU cuts the bubble about v-fold (Narayanan 2021, section 2.2.2):
    # as if the pipe carried v x m micro-batches.
    bubble = bubble_fraction(p.pp, p.accumulation * p.virtual_stages)
    tp_s, pp_s = _tp_seconds(shape, cluster, p, seq), _pp_seconds(shape, cluster, p, seq)
    ep_s = _ep_seconds(shape, cluster, p, seq)
    dp_total = _dp_seconds(shape, cluster, p)
    # Backward is 2/3 of a step's matmuls (3/4 with the recomputed forward); DP hides behind
    # the last micro-batch's backward, ZeRO-3's per-micro-batch traffic behind all compute.
    backward_share = 3 / 4 if p.checkpointing else 2 / 3
    window = compute_s if p.zero == 3 else compute_s * backward_share / p.accumulation
    dp_s = max(0.0, dp_total - overlap * window)
    if achieved_tflops is None:
        step_s = compute_s / (1 - bubble) + tp_s + pp_s + dp_s + ep_s
    else:  # an end-to-end rate: bubble and communication are inside it
        step_s = flops_per_gpu / (achieved_tflops * 1e12)
    model_flops = tokens_per_step * training_flops_per_token(shape, seq).total
    return Prediction(
        p, memory, fits(memory, spec.memory_gb), tokens_per_step, compute_s, bubble, tp_s, pp_s,
        dp_s, dp_total, ep_s, step_s, model_flops / (step_s * p.gpus * peak), tokens,
        cluster.dollars_per_gpu_hour, p.gpus,
    )


def _check(shape, cluster, p, tokens, efficiency, overlap, achieved_tflops) -> None:
    if p.gpus != cluster.gpus:
        raise ValueError(f"dp x tp x pp = {p.dp} x {p.tp} x {p.pp} = {p.gpus} GPUs, but the "
                         f"cluster has {cluster.gpus}: make the product equal")
    check_tensor_parallel(shape, p.tp)
    if shape.experts % p.ep:
        raise ValueError(f"ep={p.ep} does not divide the model's {shape.experts} expert(s): "
                         "each GPU of an EP group holds an equal share")
    if p.pp > shape.n_layer:
        raise ValueError(f"pp={p.pp} stages for {shape.n_layer} layers: at most one per layer")
    if not tokens > 0:
        raise ValueError(f"tokens to train must be positive, got {tokens}")
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency is a share of the peak, in (0, 1], got {efficiency}")
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap is a share of the compute window, in [0, 1], got {overlap}")
    if achieved_tflops is not None and not achieved_tflops > 0:
        raise ValueError(f"achieved_tflops must be positive TFLOP/s per GPU, got {achieved_tflops}")


def _tp_seconds(shape: ModelShape, cluster: Cluster, p: Parallel, seq: int) -> float:
    if p.tp == 1:
        return 0.0
    per_layer = 6 if p.checkpointing else 4  # 2 forward, 2 backward, 2 in the recomputation
    all_reduces = per_layer * math.ceil(shape.n_layer / p.pp) * p.accumulation
    # Each ring all-reduce takes 2 phases of tp - 1 steps, one message each.
    messages = all_reduces * PHASES["all_reduce"] * (p.tp - 1)
    return link(cluster.link_for("tp", p)).seconds(tp_bytes(shape, p, seq), messages)


def _pp_seconds(shape: ModelShape, cluster: Cluster, p: Parallel, seq: int) -> float:
    if p.pp == 1:
        return 0.0
    # Forward and backward time slots of the schedule; interleaving sends v times as often.
    slots = 2 * (p.accumulation * p.virtual_stages + p.pp - 1)
    over = cluster.link_for("pp", p)
    return slots * send_seconds(activation_bytes(shape, p, seq) / p.tp, over)


def _ep_seconds(shape: ModelShape, cluster: Cluster, p: Parallel, seq: int) -> float:
    if p.ep == 1:
        return 0.0
    per_layer = 6 if p.checkpointing else 4  # 2 forward, 2 backward, 2 in the recomputation
    all_to_alls = per_layer * math.ceil(shape.n_layer / p.pp) * p.accumulation
    tokens = p.micro_batch * seq  # a data-parallel rank's, per micro-batch
    # Each token's top_k copies: the (ep-1)/ep of them that leave are expert_parallel_bytes'.
    held = tokens * shape.top_k * shape.d_model * DTYPE_BYTES[DTYPE]
    return all_to_alls * all_to_all_seconds(held, p.ep, cluster.link_for("ep", p))


def _dp_seconds(shape: ModelShape, cluster: Cluster, p: Parallel) -> float:
    layers = math.ceil(shape.n_layer / p.pp)
    experts = expert_parameters(shape, layers)
    others = count_parameters(shape.replace(n_layer=layers)).total - experts
    over = cluster.link_for("dp", p)
    # The other parameters are summed over all dp replicas; a GPU's 1/ep of the experts over the
    # dp / ep replicas that hold the same ones.
    groups = ((others / p.tp, p.dp), (experts / p.ep / p.tp, p.dp // p.ep))
    return sum(ring_seconds(kind, n, ranks, over) for params, ranks in groups if params
               for kind, n in dp_collectives(params, p.zero, p.accumulation))
