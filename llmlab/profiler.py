"""Where a training step's time goes: torch.profiler around one step, its events as plain
records (the top operators, a timeline, memory over the step, a GPU's idle gaps between
kernels), and what an operator costs in FLOPs and bytes, to place it on a roofline.

It takes the step as a callable, so it knows nothing of models or training loops.
"""

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile


@dataclass(frozen=True)
class OpEvent:
    """One operator (or, on a GPU, one kernel) the profiler saw, times in microseconds from the
    start of the profile. `memory_bytes` is what it allocated minus what it freed (in CPU and
    GPU memory), its children excluded; `phase` is forward, backward or optimizer; `outer` marks
    an aten operator called by no other aten operator (the model's, autograd's or the
    optimizer's own calls)."""

    name: str
    start_us: float
    duration_us: float
    self_us: float
    memory_bytes: int = 0
    flops: int = 0
    phase: str = "forward"
    outer: bool = True


@dataclass(frozen=True)
class StepProfile:
    """The profiled step: its CPU operators and, on a GPU, its kernels."""

    ops: list[OpEvent]
    kernels: list[OpEvent]


def profile_step(
    step: Callable[[], object],
    *,
    warmup: int = 2,
    cuda: bool = False,
    trace_path: str | Path | None = None,
) -> StepProfile:
    """Run `step()` `warmup` times, then once under torch.profiler (shapes, memory and FLOPs
    recorded; CUDA kernels too when `cuda`); write a Chrome/Perfetto trace to `trace_path`."""
    if warmup < 0:
        raise ValueError(f"need warmup >= 0, got {warmup}")
    # The first steps pay for allocation, kernel choice and the optimizer's new state.
    for _ in range(warmup):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=True, profile_memory=True,
                 with_flops=True) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()  # kernels run after their launch: wait for the last one
    if cuda and not any(e.device_type == DeviceType.CUDA for e in prof.events()):
        raise RuntimeError("the profiler recorded no CUDA kernel: is CUPTI available? Run with "
                           "KINETO_LOG_LEVEL=2 to see the profiler's own errors.")
    if trace_path is not None:
        Path(trace_path).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace_path))
    return events_of(prof.events())


def _ancestors(event) -> list:
    chain = []
    while event.cpu_parent is not None:
        event = event.cpu_parent
        chain.append(event)
    return chain


def _phase(root_name: str) -> str:
    # Autograd runs each backward node under an "autograd::engine" range and the optimizer
    # under "Optimizer.step#..." / "Optimizer.zero_grad#...": the outermost range names the phase.
    if root_name.startswith("autograd::engine"):
        return "backward"
    return "optimizer" if root_name.startswith("Optimizer.") else "forward"


def events_of(function_events: Iterable) -> StepProfile:
    """torch.profiler's FunctionEvents as OpEvents (CPU operators, and GPU kernels apart)."""
    function_events = list(function_events)
    origin = min((e.time_range.start for e in function_events), default=0.0)
    ops, kernels = [], []
    for e in function_events:
        start, duration = e.time_range.start - origin, e.time_range.elapsed_us()
        if e.device_type == DeviceType.CUDA:
            kernels.append(OpEvent(e.name, start, duration, duration))
            continue
        ancestors = _ancestors(e)
        root = ancestors[-1].name if ancestors else e.name
        outer = e.name.startswith("aten::") and not any(
            a.name.startswith("aten::") for a in ancestors)
        memory = e.self_cpu_memory_usage + e.self_device_memory_usage
        ops.append(OpEvent(e.name, start, duration, e.self_cpu_time_total, memory,
                           e.flops or 0, _phase(root), outer))
    return StepProfile(ops, kernels)


CATEGORIES = ("matmul", "attention", "layer norm", "softmax and loss", "GELU", "optimizer",
              "other element-wise", "copies and allocation", "CUDA runtime")
_CATEGORY_WORDS = {  # the first category with a word in the operator's name wins
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "gemm"),
    "attention": ("attention", "flash"),
    "layer norm": ("layer_norm",),
    "softmax and loss": ("softmax", "nll_loss", "cross_entropy"),
    "GELU": ("gelu",),
    # On a GPU the CPU's own time goes to launching kernels and waiting (cudaLaunchKernel, ...).
    "CUDA runtime": ("cuda",),
    "copies and allocation": ("copy", "cat", "fill", "zero", "empty", "memcpy", "memset",
                              "aten::to", "contiguous", "[memory]"),
}


def category(event: OpEvent) -> str:
    """Which kind of work an operator does, for the timeline's rows and the shares."""
    name = event.name.lower()
    for kind, words in _CATEGORY_WORDS.items():
        if any(word in name for word in words):
            return kind
    return "optimizer" if event.phase == "optimizer" else "other element-wise"


def top_operators(events: Sequence[OpEvent], k: int = 10) -> list[dict]:
    """The `k` operators with the most self time (time in the operator, not in what it calls),
    summed over their calls, as table rows."""
    total = sum(e.self_us for e in events)
    if total <= 0:
        raise ValueError("these events have no self time: was anything profiled?")
    by_name: dict[str, list[OpEvent]] = {}
    for e in events:
        by_name.setdefault(e.name, []).append(e)
    rows = sorted(by_name.items(), key=lambda item: -sum(e.self_us for e in item[1]))[:k]
    return [
        {
            "operator": name,
            "calls": len(calls),
            "self ms": f"{sum(e.self_us for e in calls) / 1e3:.2f}",
            "share": f"{sum(e.self_us for e in calls) / total:.1%}",
            "GFLOP": f"{sum(e.flops for e in calls) / 1e9:.2f}" if any(e.flops for e in calls)
            else "-",
        }
        for name, calls in rows
    ]


def category_shares(events: Sequence[OpEvent]) -> dict[str, float]:
    """The fraction of the step's self time in each category (those with any time)."""
    total = sum(e.self_us for e in events)
    times = dict.fromkeys(CATEGORIES, 0.0)
    for e in events:
        times[category(e)] += e.self_us
    return {kind: time / total for kind, time in times.items() if time > 0}


def timeline_bars(events: Sequence[OpEvent]) -> dict[str, list[tuple[float, float]]]:
    """(start ms, duration ms) bars per category, of the outer aten operators (they do not
    overlap on one thread, so each bar is time the CPU spent in that kind of work)."""
    bars: dict[str, list[tuple[float, float]]] = {kind: [] for kind in CATEGORIES}
    for e in events:
        if e.outer:
            bars[category(e)].append((e.start_us / 1e3, e.duration_us / 1e3))
    return {kind: spans for kind, spans in bars.items() if spans}


def phase_spans(events: Sequence[OpEvent]) -> dict[str, tuple[float, float]]:
    """(start ms, end ms) of each phase: from its first operator to the next phase's first
    (small ops outside any phase's range, like the loss's detach, do not split the spans)."""
    firsts: dict[str, float] = {}
    for e in events:
        firsts[e.phase] = min(firsts.get(e.phase, math.inf), e.start_us / 1e3)
    end = max(((e.start_us + e.duration_us) / 1e3 for e in events), default=0.0)
    order = sorted(firsts, key=firsts.get)
    ends = [firsts[p] for p in order[1:]] + [end]
    return {p: (firsts[p], stop) for p, stop in zip(order, ends, strict=True)}


def memory_curve(events: Sequence[OpEvent]) -> tuple[list[float], list[int]]:
    """(times in ms, bytes allocated since the profile began): each operator's own allocations
    minus frees, added up in the order the operators started."""
    times, total, level = [], 0, []
    for e in sorted(events, key=lambda e: e.start_us):
        if e.memory_bytes:
            total += e.memory_bytes
            times.append(e.start_us / 1e3)
            level.append(total)
    return times, level


@dataclass(frozen=True)
class GpuIdle:
    """How long the GPU ran kernels and how long it waited between them (microseconds)."""

    busy_us: float
    idle_us: float
    gaps_us: tuple[float, ...]

    @property
    def idle_fraction(self) -> float:
        span = self.busy_us + self.idle_us
        return self.idle_us / span if span else 0.0


def gpu_gaps(kernels: Sequence[OpEvent]) -> GpuIdle:
    """Busy and idle time between the first kernel's start and the last one's end. Kernels
    that overlap (on several streams) count once: the GPU is busy while any of them runs."""
    busy, gaps = 0.0, []
    end = None
    for k in sorted(kernels, key=lambda k: k.start_us):
        k_end = k.start_us + k.duration_us
        if end is None or k.start_us >= end:
            if end is not None and k.start_us > end:
                gaps.append(k.start_us - end)
            busy += k.duration_us
            end = k_end
        elif k_end > end:  # overlaps the running interval: only its tail is new busy time
            busy += k_end - end
            end = k_end
    return GpuIdle(busy, sum(gaps), tuple(gaps))


# FLOPs per element of the element-wise operators (per parameter for AdamW). Conventions
# differ by a few FLOPs; their intensity stays far below any machine's ridge point either way.
# A convention (Lab 09's Exercise 1 expects these counts): counting every operation, the bias
# corrections and square root included, gives AdamW 14-16 and the tanh GELU 9.
FLOPS_PER_ELEMENT = {
    "layer_norm": 8,  # mean (1), variance (3), normalise (2), scale and shift (2)
    "softmax": 5,  # max, subtract, exp, sum, divide
    "gelu": 8,  # the tanh form: a cube, a tanh, and six multiplies and adds around them
    "adamw": 12,  # decay, two moment updates, and the bias-corrected update
}
OPERATORS = ("matmul", *FLOPS_PER_ELEMENT)


def operator_cost(name: str, shape: Sequence[int], dtype: torch.dtype) -> tuple[int, int]:
    """(FLOPs, bytes moved) of one operator, the bytes the fewest a kernel can move: each input
    read once, each output written once, in `dtype`.

    matmul: shape (m, k, n), an (m x k) @ (k x n) product; layer_norm: (rows, d), with a weight
    and a bias of d; softmax and gelu: any shape; adamw: (parameters,), reading a parameter,
    its gradient and the two moments, writing the parameter and the moments.
    """
    size = dtype.itemsize
    if name == "matmul":
        m, k, n = shape
        return 2 * m * k * n, size * (m * k + k * n + m * n)
    if name not in FLOPS_PER_ELEMENT:
        raise ValueError(f"unknown operator {name!r}: use one of {OPERATORS}")
    elements = math.prod(shape)
    tensors = {"layer_norm": 2, "softmax": 2, "gelu": 2, "adamw": 7}[name]
    parameters = 2 * shape[-1] if name == "layer_norm" else 0
    return FLOPS_PER_ELEMENT[name] * elements, size * (tensors * elements + parameters)


@dataclass(frozen=True)
class RooflinePoint:
    """An operator placed on a roofline: its intensity and what it achieved."""

    name: str
    flops: float
    bytes: float
    seconds: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes

    @property
    def gflops_per_s(self) -> float:
        return self.flops / self.seconds / 1e9

    @property
    def gbytes_per_s(self) -> float:
        return self.bytes / self.seconds / 1e9


def attainable_gflops(intensity: float, bandwidth_gbs: float, peak_tflops: float) -> float:
    """The roofline: the most GFLOP/s an operator of this intensity can reach on the machine."""
    return min(peak_tflops * 1e3, bandwidth_gbs * intensity)


def bound_by(intensity: float, bandwidth_gbs: float, peak_tflops: float) -> str:
    """"memory" left of the ridge point (bytes set the time), "compute" right of it."""
    ridge = peak_tflops * 1e12 / (bandwidth_gbs * 1e9)
    return "memory" if intensity < ridge else "compute"
