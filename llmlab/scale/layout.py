"""Choosing a layout: how to spread a training run over GPUs, by memory first, then by a rule.

A layout is a data-parallel degree `dp` (with a ZeRO stage), a tensor-parallel degree `tp` and
a pipeline degree `pp`, with dp x tp x pp = all GPUs; a mixture of experts also shares its experts
out over `ep` of each stage's data-parallel ranks (expert parallelism: each holds 1/ep of them,
and tokens travel to their experts by all-to-all). `choose_layouts` keeps the layouts whose
planned memory per GPU fits, and ranks them by one stated rule, simplest communication first:

1. plain data parallel: each GPU holds the whole model; one gradient all-reduce per step;
2. ZeRO-1/2: optimizer states (and gradients) sharded; the ZeRO paper's traffic is plain DP's
   (PyTorch's ZeRO-1 and DeepSpeed's ZeRO-2 send 1.5x: see benchmarks/parallel.py);
3. ZeRO-3/FSDP: weights sharded too, about 1.5x the traffic (they are gathered twice a step);
4. tensor parallel, only inside a node with NVLink: every layer all-reduces its activations;
5. pipeline parallel, only across nodes: stages pass activations over the slower link, and GPUs
   idle in the pipeline's bubble. Between nodes on Ethernet it ranks before ZeRO-3, whose
   gradient and weight traffic would cross that link.

Ties go to fewer model splits, then a lower ZeRO stage, then more free memory. This is a first
cut on memory alone; Lab 05 adds time (an alpha-beta communication model, llmlab.scale.search)
on top.

The one layout type is `Parallel`: the degrees, the ZeRO stage and the micro-batching. A layout
that fits (`Layout`) holds one, and so does a layout to simulate (llmlab.scale.simulate);
llmlab.memory's TrainingSetup sees a narrower view of it (`stage_setup`). Ranks are numbered in
one order, RANK_ORDER, for the planner's links and for the rank grid and device mesh
(llmlab.distributed.mesh) alike: tensor parallel fastest, then data parallel, pipeline slowest.
"""

from dataclasses import dataclass

from llmlab.gpu_specs import gpu_names, resolve_gpu_spec
from llmlab.memory import (
    MemoryEstimate,
    TrainingSetup,
    estimate_memory,
    fits,
    tensor_parallel_problem,
)
from llmlab.models import ModelShape, as_shape
from llmlab.tables import markdown_table
from llmlab.units import GB

INSIDE_NODE = ("nvlink", "pcie")
BETWEEN_NODES = ("infiniband", "ethernet")
LINK = {"infiniband": "InfiniBand", "ethernet": "Ethernet"}
# The rank grid's axes, slowest to fastest: Megatron-LM's and torchtitan's order. TP talks after
# every layer, so its ranks are neighbours on one node; a pipeline stage is a block of whole nodes.
RANK_ORDER = ("pp", "dp", "tp")


@dataclass(frozen=True)
class Parallel:
    """A layout: the parallel degrees, the ZeRO stage and the micro-batching. It is the one
    layout type: the planner's layouts hold one, and the rank grid (llmlab.distributed.mesh) is
    built from one. Ranks are numbered as the device mesh numbers them: TP fastest, then DP,
    then PP (RANK_ORDER), so TP groups stay inside a node."""

    dp: int
    tp: int = 1
    pp: int = 1
    zero: int = 0
    micro_batch: int = 1  # sequences per micro-batch
    accumulation: int = 1  # micro-batches per step per replica (the pipeline's m)
    checkpointing: bool = True
    seq: int = 0  # tokens per sequence; 0: the model's context
    virtual_stages: int = 1  # interleaved 1F1B: each GPU holds this many chunks of layers
    ep: int = 1  # expert parallel: data-parallel ranks (neighbours) sharing out the experts

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "micro_batch", "accumulation", "virtual_stages", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.dp % self.ep:
            raise ValueError(f"ep={self.ep} does not divide dp={self.dp}: the experts are shared "
                             "out over data-parallel ranks; pick an ep that divides dp")
        if not isinstance(self.seq, int) or self.seq < 0:
            raise ValueError(f"seq must be 0 (the model's context) or a positive integer, "
                             f"got {self.seq!r}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero must be a ZeRO stage 0-3, got {self.zero!r}")

    @classmethod
    def for_setup(cls, setup: TrainingSetup, dp: int, tp: int = 1, pp: int = 1,
                  zero: int = 0, ep: int = 1) -> "Parallel":
        """These degrees with `setup`'s micro-batching: `stage_setup`'s way back."""
        return cls(dp, tp, pp, zero, setup.batch, setup.grad_accumulation, setup.checkpointing,
                   setup.seq, ep=ep)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    def strides(self) -> dict[str, int]:
        """How many ranks apart neighbours along each axis are: tp 1, dp tp, pp dp x tp."""
        strides, stride = {}, 1
        for dim in reversed(RANK_ORDER):
            strides[dim] = stride
            stride *= getattr(self, dim)
        return strides

    def crosses_nodes(self, dim: str, gpus_per_node: int) -> bool:
        """Whether some `dim` group ("dp", "tp", "pp" or "ep") has ranks on two nodes, ranks
        filling node 0 first, then node 1. Each group lies in a run of stride x size consecutive
        ranks, and one of them crosses exactly when those runs do not tile a node. An EP group is
        ep neighbouring data-parallel ranks: DP's stride."""
        if dim not in (*RANK_ORDER, "ep"):
            raise ValueError(f"unknown dimension {dim!r}: use one of {(*RANK_ORDER, 'ep')}")
        size, stride = getattr(self, dim), self.strides()["dp" if dim == "ep" else dim]
        return size > 1 and gpus_per_node % (stride * size) != 0

    def describe(self) -> str:
        """Everything, degrees of 1 included: "DP 8 x TP 1 x PP 1, micro-batch 1 x 1"."""
        chunks = f" ({self.virtual_stages} chunks)" if self.virtual_stages > 1 else ""
        return (f"{self._data_parallel()} x TP {self.tp} x PP {self.pp}{chunks}, micro-batch "
                f"{self.micro_batch} x {self.accumulation}")

    def degrees(self) -> str:
        """The degrees alone, those of 1 left out: "DP 8 ZeRO-1 x TP 2"."""
        splits = [f"{name} {degree}" for name, degree in (("TP", self.tp), ("PP", self.pp))
                  if degree > 1]
        return " x ".join([self._data_parallel(), *splits])

    def _data_parallel(self) -> str:
        """The data-parallel degree, the experts' share-out and the ZeRO stage, if any: "DP 8",
        "DP 8 (EP 4)" or "DP 8 ZeRO-1"."""
        experts = f" (EP {self.ep})" if self.ep > 1 else ""
        return f"DP {self.dp}{experts}" + (f" ZeRO-{self.zero}" if self.zero else "")


@dataclass(frozen=True)
class Layout:
    """A layout that fits in memory, as `choose_layouts` ranks it."""

    parallel: Parallel  # its micro-batching is the TrainingSetup's it was planned with
    estimate: MemoryEstimate  # per GPU, of the most loaded pipeline stage
    fit: str  # "yes" or "tight" (see llmlab.memory.fits)
    reason: str  # the rule that ranks it, in one line

    def describe(self) -> str:
        """The degrees alone ("DP 8 ZeRO-1 x TP 2"): the micro-batching is the set-up's."""
        return self.parallel.degrees()


def gpu_memory_gb(gpu: str | float) -> float:
    """GB of a GPU as llmlab.gpu_specs resolves it ("h100", "H100 SXM", "A100 40GB"), or a number of
    GB."""
    if isinstance(gpu, int | float):
        return float(gpu)
    spec = resolve_gpu_spec(gpu)
    if spec is None:
        names = ", ".join(gpu_names())
        raise ValueError(f"unknown GPU {gpu!r}: use one of {names}, or its memory in GB")
    return spec.memory_gb


def choose_layouts(
    model: str | ModelShape,
    gpu: str | float,
    gpus_per_node: int = 8,
    nodes: int = 1,
    inside_node: str = "nvlink",
    between_nodes: str = "infiniband",
    setup: TrainingSetup | None = None,
) -> list[Layout]:
    """Every layout of `nodes` x `gpus_per_node` GPUs that fits in memory, best first.

    `setup` gives the micro-batch, precision and optimizer (its zero, gpus and tensor_parallel
    are what this function chooses). An empty list means nothing fits: try more GPUs, LoRA,
    activation checkpointing or a smaller micro-batch (`llmlab.memory.memory_options`).
    """
    shape = as_shape(model)
    gpu_gb = gpu_memory_gb(gpu)
    _check(gpu_gb, gpus_per_node, nodes, inside_node, between_nodes)
    setup = setup or TrainingSetup()
    total = gpus_per_node * nodes
    layouts = []
    for tp in _tensor_parallel_degrees(shape, gpus_per_node, inside_node):
        for pp in _pipeline_degrees(shape, nodes):
            dp = total // (tp * pp)
            for zero in (0, 1, 2, 3) if dp > 1 else (0,):
                for ep in _expert_parallel_degrees(shape, dp):
                    parallel = Parallel.for_setup(setup, dp, tp, pp, zero, ep)
                    estimate = stage_estimate(shape, setup, parallel)
                    fit = fits(estimate, gpu_gb)
                    if fit != "no":
                        reason = _reason(parallel, gpus_per_node, between_nodes)
                        layouts.append(Layout(parallel, estimate, fit, reason))
    return sorted(layouts, key=lambda layout: _rank(layout, nodes, between_nodes))


def _check(gpu_gb: float, gpus_per_node: int, nodes: int, inside: str, between: str) -> None:
    if not gpu_gb > 0:
        raise ValueError(f"GPU memory must be a positive number of GB, got {gpu_gb}")
    for name, value in (("gpus_per_node", gpus_per_node), ("nodes", nodes)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if inside not in INSIDE_NODE:
        raise ValueError(f"inside_node={inside!r}: GPUs in a node talk over one of {INSIDE_NODE}")
    if between not in BETWEEN_NODES:
        raise ValueError(f"between_nodes={between!r}: nodes talk over one of {BETWEEN_NODES}")


def _tensor_parallel_degrees(shape: ModelShape, gpus_per_node: int, inside: str) -> list[int]:
    """TP only over NVLink, inside one node, and by a degree the heads and the MLP split by."""
    if inside != "nvlink":
        return [1]
    return [tp for tp in _divisors(gpus_per_node) if not tensor_parallel_problem(shape, tp)]


def _pipeline_degrees(shape: ModelShape, nodes: int) -> list[int]:
    """PP only across nodes (one or more whole nodes per stage), at most one layer per stage."""
    return [pp for pp in _divisors(nodes) if pp <= shape.n_layer]


def _expert_parallel_degrees(shape: ModelShape, dp: int) -> list[int]:
    """EP only for a mixture of experts, by a degree that divides both its experts and dp."""
    return [ep for ep in _divisors(dp) if shape.experts % ep == 0]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def stage_setup(setup: TrainingSetup, parallel: Parallel) -> TrainingSetup:
    """`setup` (precision, optimizer, ...) with `parallel`'s layout and micro-batching, as
    llmlab.memory sees one pipeline stage: TrainingSetup's gpus, zero and tensor_parallel are a
    narrower view of a layout (the stage's dp x tp GPUs; the pipeline is estimate_memory's
    pipeline_stages), and this is the one conversion."""
    p = parallel
    return setup.replace(batch=p.micro_batch, seq=p.seq, checkpointing=p.checkpointing,
                         grad_accumulation=p.accumulation, zero=p.zero, gpus=p.dp * p.tp,
                         tensor_parallel=p.tp, expert_parallel=p.ep)


def stage_estimate(shape, setup: TrainingSetup, parallel: Parallel) -> MemoryEstimate:
    """The memory of the most loaded of the pp pipeline stages (llmlab.memory plans each: the
    first holds the embeddings and pp micro-batches in flight, the last the head and one).
    `setup` gives the precision and optimizer; `parallel` the layout and micro-batching."""
    setup, pp = stage_setup(setup, parallel), parallel.pp
    # A middle stage holds as many blocks as the first, fewer micro-batches and no embeddings
    # or head: the most loaded stage is the first or the last.
    stages = [estimate_memory(shape, setup, pipeline_stage=i, pipeline_stages=pp)
              for i in sorted({0, pp - 1})]
    return max(stages, key=lambda estimate: estimate.total)


def _tier(layout: Layout, nodes: int, between: str) -> int:
    """The rule of the module docstring: 1 plain DP, 2 ZeRO-1/2, 3 ZeRO-3, 4 TP, 5 PP (over
    Ethernet between nodes, PP 3 and ZeRO-3 4)."""
    over_ethernet, p = nodes > 1 and between == "ethernet", layout.parallel
    if p.tp > 1:
        return 4
    if p.pp > 1:
        return 3 if over_ethernet else 5
    if p.zero == 3:
        return 4 if over_ethernet else 3
    return 2 if p.zero else 1


def _rank(layout: Layout, nodes: int, between: str) -> tuple:
    p = layout.parallel
    return (layout.fit != "yes", _tier(layout, nodes, between), p.tp * p.pp, p.zero, p.ep,
            layout.estimate.total)


def _reason(parallel: Parallel, gpus_per_node: int, between: str) -> str:
    tp, pp, zero = parallel.tp, parallel.pp, parallel.zero
    if tp > 1:
        reason = f"each layer split over {tp} GPUs of a node: fast only on NVLink"
    elif pp > 1:
        reason = f"{pp} pipeline stages across nodes: only activations cross {LINK[between]}"
    elif zero == 3:
        reason = "weights, gradients and optimizer states sharded: ~1.5x DP's traffic"
    elif zero:
        reason = f"ZeRO-{zero} shards the optimizer's part: less memory, 1-1.5x DP's traffic"
    else:
        reason = "the whole model on every GPU: one gradient all-reduce per step"
    if parallel.ep > 1:
        over = LINK[between] if parallel.crosses_nodes("ep", gpus_per_node) else "inside a node"
        reason += f"; experts over {parallel.ep} GPUs: all-to-all {over}"
    if parallel.crosses_nodes("dp", gpus_per_node) and between == "ethernet":
        reason += f"; data-parallel traffic crosses {LINK[between]}"
    return reason


def layout_table(layouts: list[Layout], limit: int = 8) -> str:
    """The best `limit` layouts as text: rank, layout, GB per GPU, fit, reason."""
    if not layouts:
        return "nothing fits: more GPUs, LoRA, checkpointing or a smaller micro-batch"
    rows = [{"#": i, "layout": layout.describe(), "GB/GPU": f"{layout.estimate.total / GB:.1f}",
             "fit": layout.fit, "why": layout.reason}
            for i, layout in enumerate(layouts[:limit], 1)]
    return markdown_table(rows, aligned=True)
