"""Checks for Lab 00 (environment and GPU check).

The timer is checked on a fake GPU with a fake clock: it runs each call asynchronously, as CUDA
does, and records whether the clock was read while work was still running. The matmul measurement
is checked by recording the PyTorch operations its timed function runs.
"""

import math
import random
import statistics
from typing import NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

from llmlab.course.checks import (
    ExerciseFailed,
    call,
    exercise,
    expect_number,
    expect_real,
    is_close,
    passed,
    real_number,
)
from llmlab.device import dtype_name, training_dtype_for
from llmlab.gpu_specs import DTYPES, GPU_SPECS, GpuSpec
from llmlab.matmul import matmul_flops, measure_matmul
from llmlab.timing import time_fn

# ---------------------------------------------------------------- Exercise 1: an honest timer


class FakeGpu:
    """A device that runs each call of `work` asynchronously, with a clock it controls.

    `work()` returns at once (a launch costs LAUNCH_S) and leaves its duration queued, like a CUDA
    kernel; `synchronize()` waits for the queue; `clock()` reads the time and notes whether work
    was still running. The first COLD_CALLS calls are slow, as first calls are on a real GPU.
    """

    LAUNCH_S = 1e-5
    COLD_CALLS = 2

    def __init__(self, seed: int, warmup: int, repeats: int):
        rng = random.Random(seed)
        self.durations = [rng.uniform(0.9e-3, 1.1e-3) for _ in range(warmup + repeats)]
        self.durations[: self.COLD_CALLS] = [40e-3] * min(self.COLD_CALLS, warmup + repeats)
        if repeats >= 3:  # one timed call slowed by another process, so mean and median differ
            self.durations[rng.randrange(max(warmup, self.COLD_CALLS), warmup + repeats)] = 30e-3
        self.now = 1000.0  # a clock does not start at 0: returning clock() itself is wrong
        self.busy_until = self.now
        self.calls = 0
        self.clock_reads = 0
        self.reads_while_busy = 0

    def work(self) -> None:
        self.now += self.LAUNCH_S
        extra_call = self.calls >= len(self.durations)  # a timer that calls fn too often
        duration = 1e-3 if extra_call else self.durations[self.calls]
        self.busy_until = max(self.busy_until, self.now) + duration
        self.calls += 1

    def synchronize(self) -> None:
        self.now = max(self.now, self.busy_until)

    def clock(self) -> float:
        self.clock_reads += 1
        self.reads_while_busy += self.busy_until > self.now
        return self.now

    def per_call(self, first: int, count: int) -> list[float]:
        """What an honest timer measures for calls first .. first + count - 1."""
        return [self.LAUNCH_S + d for d in self.durations[first : first + count]]


def time_fn_median(fn, *, warmup=2, repeats=5, device=torch.cpu, clock=None) -> float:
    """llmlab.timing.time_fn with this exercise's signature, for a learner who skips it.

    `clock` is accepted and not used: llmlab reads its own (CUDA events on a GPU)."""
    kind = device.__name__.removeprefix("torch.")  # the module torch.cuda -> the device "cuda"
    return time_fn(fn, warmup=warmup, repeats=repeats, device=kind).median_s


def _timer_hint(got: float, gpu: FakeGpu, warmup: int, repeats: int) -> str:
    timed = gpu.per_call(warmup, repeats)
    wrong = [
        (statistics.fmean(timed), "That is the mean: one slow repeat drags it; use the median."),
        (min(timed), "That is the fastest repeat, not the typical one: use the median."),
        (max(timed), "That is the slowest repeat, not the typical one: use the median."),
        (sum(timed), "That is the total of all repeats: return seconds per call (the median)."),
        (statistics.median(timed) * 1e3, "That is in milliseconds: return seconds."),
        (statistics.median(gpu.per_call(0, warmup + repeats)),
         "That median includes the warm-up calls: time only the calls after the warm-up."),
    ]
    return next((text for value, text in wrong if is_close(got, value, 1e-6)), "")


def _check_timer_case(name: str, honest_time, seed: int, warmup: int, repeats: int) -> None:
    gpu = FakeGpu(seed, warmup, repeats)
    text = f"honest_time(fn, warmup={warmup}, repeats={repeats}, device=<fake GPU>, clock=<fake>)"
    got = call(name, honest_time, gpu.work, warmup=warmup, repeats=repeats, device=gpu,
               clock=gpu.clock)
    if gpu.clock_reads == 0:
        raise ExerciseFailed(f"{name}: {text} never called clock(): read the time with the "
                             "`clock` argument (the check passes a fake one).")
    if gpu.calls != warmup + repeats:
        raise ExerciseFailed(
            f"{name}: {text} called fn {gpu.calls} times; expected {warmup + repeats}: {warmup} "
            f"untimed warm-up calls first, then {repeats} timed ones."
        )
    if gpu.reads_while_busy:
        raise ExerciseFailed(
            f"{name}: {text} read the clock {gpu.reads_while_busy} time(s) while the GPU was "
            "still running earlier calls. GPU calls return before the work is done: call "
            "device.synchronize() before every clock reading, so each timing covers whole calls."
        )
    number = expect_real(name, text, got)
    timed = sorted(gpu.per_call(warmup, repeats))
    low, high = timed[(repeats - 1) // 2], timed[repeats // 2]  # either middle one, if even
    if not low * (1 - 1e-6) <= number <= high * (1 + 1e-6):
        hint = _timer_hint(number, gpu, warmup, repeats)
        expected = statistics.median(timed)
        raise ExerciseFailed(
            f"{name}: {text} returned {got!r}, expected about {expected:.6g} s. {hint}".strip()
        )


@exercise(fallback=time_fn_median, fallback_name="llmlab.timing.time_fn")
def exercise_honest_time(honest_time) -> None:
    """Exercise 1: honest_time(fn, *, warmup, repeats, device, clock) -> median seconds per call."""
    name = "Exercise 1 (an honest timer)"
    # (0, 1): no warm-up asked for, one call; (3, 6): an even count has two middle values.
    for seed, (warmup, repeats) in enumerate([(2, 5), (3, 6), (1, 7), (0, 1)]):
        _check_timer_case(name, honest_time, seed, warmup, repeats)
    passed(name, "warm-up, synchronised clock readings and the median, on a fake GPU")


# ---------------------------------------------------------------- Exercise 2: measured TFLOP/s

MATMUL_OPS = {"mm", "bmm", "matmul", "addmm"}
# Operations that make or copy a tensor: inside the timed function they are timed as matmul work.
MAKES_DATA = ("rand", "empty", "zeros", "ones", "full", "normal", "uniform", "copy", "clone",
              "arange", "fill")


class Op(NamedTuple):
    """One PyTorch operation: its name, its tensor arguments and the tensor it returned."""

    name: str
    inputs: list[torch.Tensor]
    output: torch.Tensor | None


class RecordOps(TorchDispatchMode):
    """Records every PyTorch operation run inside it."""

    def __init__(self):
        super().__init__()
        self.ops: list[Op] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = self.run(func, args, kwargs or {})
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        written = output if isinstance(output, torch.Tensor) else None
        self.ops.append(Op(func.overloadpacket.__name__, tensors, written))
        return output

    def run(self, func, args, kwargs):
        return func(*args, **kwargs)


class FakeTimer:
    """A timer that runs the function it is given under RecordOps and reports `seconds`."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.ops: list[Op] | None = None

    def __call__(self, fn, **ignored) -> float:
        with RecordOps() as recorder:
            fn()
        self.ops = recorder.ops
        return self.seconds


def measure_matmul_tflops(n, dtype, device, timer=None) -> float:
    """llmlab.matmul.measure_matmul with this exercise's signature, for a learner who skips it.

    `timer` is accepted and not used: llmlab times with its own `time_fn`."""
    return measure_matmul(n, dtype_name(dtype), device, repeats=10).tflops


def _named(ops: list[Op], words: tuple[str, ...]) -> list[str]:
    """The names of the operations whose name holds one of `words`."""
    return sorted({op.name for op in ops if any(word in op.name for word in words)})


def _check_timed_ops(name: str, text: str, ops, n: int, dtype: torch.dtype) -> None:
    if ops is None:
        raise ExerciseFailed(f"{name}: {text} never called `timer`: time the matmul with it.")
    makers = _named(ops, MAKES_DATA)
    if makers:
        raise ExerciseFailed(
            f"{name}: {text}: the timed function also runs {', '.join(makers)}: it makes or "
            "copies tensors, and that time would count as matmul time. Create the inputs, in "
            "`dtype`, before timing; time only the matmul."
        )
    matmuls = [op.inputs for op in ops if op.name in MATMUL_OPS]
    if len(matmuls) != 1:
        raise ExerciseFailed(f"{name}: {text}: the timed function ran {len(matmuls)} matmuls; "
                             "it should run exactly one.")
    for tensor in matmuls[0][:2]:
        if tensor.dtype != dtype or tensor.numel() != n * n:
            raise ExerciseFailed(
                f"{name}: {text}: the matmul multiplied a {tensor.dtype} tensor of shape "
                f"{tuple(tensor.shape)}; expected {n} x {n} inputs in {dtype}."
            )


UNIT_MISTAKES = (
    (0.5, "A multiply-add is 2 FLOPs: count both the multiply and the add."),
    (1e3, "Units: 1 TFLOP/s is 1e12 FLOP/s (you may have divided by 1e9)."),
    (1e-3, "Units: 1 TFLOP/s is 1e12 FLOP/s (you may have divided by 1e15)."),
)


@exercise(fallback=measure_matmul_tflops, fallback_name="llmlab.matmul.measure_matmul")
def exercise_matmul_tflops(matmul_tflops) -> None:
    """Exercise 2: matmul_tflops(n, dtype, device, timer) -> TFLOP/s of one n x n matmul."""
    name = "Exercise 2 (measured TFLOP/s)"
    for n, dtype, seconds in [(64, torch.float32, 2.5e-4), (33, torch.bfloat16, 1e-5),
                              (8, torch.float32, 3e-6)]:
        timer = FakeTimer(seconds)
        text = f"matmul_tflops({n}, {dtype}, 'cpu', timer)"
        got = call(name, matmul_tflops, n, dtype, torch.device("cpu"), timer)
        _check_timed_ops(name, text, timer.ops, n, dtype)
        expected = matmul_flops(n, n, n) / seconds / 1e12
        expect_number(name, f"{text} (timer says {seconds} s)", got, expected,
                      mistakes=UNIT_MISTAKES)
    passed(name, "inputs made before the clock, one matmul timed, 2 n^3 FLOPs over the time")


# ---------------------------------------------------------------- Exercise 3: training dtype

DTYPE_ALIASES = {
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
}

WHY_DTYPE = {
    "bf16": "capability 8.0+ (Ampere and newer) has bf16 tensor cores: fp32's range, fp16's speed",
    "fp16": "capability 7.x (Volta, Turing) has fp16 tensor cores but no bf16; use a grad scaler",
    "fp32": "below 7.0 there are no tensor cores and no bf16, and fp16 would need a grad scaler "
    "for little or no gain: most of these GPUs run fp16 no faster than fp32 (6.1 Pascal "
    "GeForce cards at 1/64 of it); P100 (6.0) runs it at twice fp32, the one exception",
}


@exercise(
    fallback=lambda capability: training_dtype_for("cuda", capability).name,
    fallback_name="llmlab.device.training_dtype_for",
)
def exercise_training_dtype(training_dtype) -> None:
    """Exercise 3: training_dtype((major, minor)) -> "bf16" | "fp16" | "fp32" for a CUDA GPU."""
    name = "Exercise 3 (training dtype)"
    capabilities = [(3, 7), (5, 2), (6, 0), (6, 1), (7, 0), (7, 2), (7, 5), (8, 0), (8, 6),
                    (8, 9), (9, 0), (10, 0), (12, 0)]
    for capability in capabilities:
        got = call(name, training_dtype, capability)
        expected = training_dtype_for("cuda", capability).name
        if DTYPE_ALIASES.get(str(got).lower()) != expected:
            raise ExerciseFailed(
                f"{name}: training_dtype({capability}) returned {got!r}, expected {expected!r}: "
                f"{WHY_DTYPE[expected]}."
            )
    passed(name, "bf16 from Ampere (8.0) on, fp16 with a scaler on Volta/Turing, else fp32")


# ---------------------------------------------------------------- Exercise 4: the roofline


def _roofline(m, n, k, spec, dtype, *, element_bytes=None, write_c=True, flops_per_mac=2,
              combine=max, bytes_per_gb=1e9):
    """The reference, with knobs that reproduce likely mistakes (for the hints)."""
    peak = spec.tflops[dtype]
    if peak is None:
        return None
    element_bytes = element_bytes or (4 if dtype in ("fp32", "tf32") else 2)  # tf32 stores fp32
    compute_s = flops_per_mac * m * n * k / (peak * 1e12)
    moved = element_bytes * (m * k + k * n + (m * n if write_c else 0))
    memory_s = moved / (spec.bandwidth_gbs * bytes_per_gb)
    return combine(compute_s, memory_s), "compute" if compute_s >= memory_s else "memory"


def matmul_roofline(m: int, n: int, k: int, spec: GpuSpec, dtype: str):
    """The roofline time of an (m x k) @ (k x n) matmul, and whether compute or memory bounds it;
    None when the GPU lacks `dtype`. (The checks' reference and fallback: llmlab has none.)"""
    return _roofline(m, n, k, spec, dtype)


def _roofline_hint(got: float, m, n, k, spec, dtype) -> str:
    wrong = [
        (dict(combine=lambda c, _: c), "That is the compute time alone: moving A, B and C at the "
         "memory bandwidth can take longer (small m)."),
        (dict(combine=lambda _, b: b), "That is the memory time alone: the FLOPs at the peak can "
         "take longer (large matrices)."),
        (dict(combine=lambda c, b: c + b), "That adds the two: a GPU moves data while it "
         "computes, so the slower of the two sets the time."),
        (dict(combine=min), "That is the faster of the two: the slower one sets the time."),
        (dict(write_c=False), "The result C (m x n) is written to memory too."),
        (dict(element_bytes=1), "Count bytes, not elements."),
        (dict(element_bytes=2 if dtype in ("fp32", "tf32") else 4),
         "Bytes per element: fp32 and tf32 tensors take 4 bytes (TF32 is a math mode, the tensors "
         "stay fp32), bf16 and fp16 take 2."),
        (dict(flops_per_mac=1), "A multiply-add is 2 FLOPs."),
        (dict(bytes_per_gb=2**30), "Datasheet GB/s are 1e9 bytes per second, not 2**30."),
    ]
    # Several mistakes can give the same number on one input: name each of them.
    matching = [text for knobs, text in wrong
                if is_close(got, _roofline(m, n, k, spec, dtype, **knobs)[0], 1e-6)]
    return " Or: ".join(matching)


def _roofline_cases() -> list[tuple[int, int, int, GpuSpec, str]]:
    rng = random.Random(0)
    by_name = {spec.name: spec for spec in GPU_SPECS}
    fixed = [
        (1, 4096, 4096, by_name["H100 SXM"], "bf16"),  # one token: memory-bound
        (16, 4096, 4096, by_name["H100 SXM"], "tf32"),  # memory-bound: tf32 moves 4-byte floats
        (8192, 8192, 8192, by_name["H100 SXM"], "bf16"),  # compute-bound
        (4096, 4096, 4096, by_name["RTX 3090"], "tf32"),  # tf32 no faster than fp32 here
        (64, 4096, 4096, by_name["A100 SXM 80GB"], "fp32"),
        (512, 11008, 4096, by_name["T4"], "fp16"),
    ]
    drawn = [
        (rng.choice([1, 16, 128, 1024, 4096]), rng.choice([256, 1024, 4096]),
         rng.choice([64, 1024, 8192]), rng.choice(GPU_SPECS), rng.choice(DTYPES))
        for _ in range(12)
    ]
    return fixed + drawn


def _read_roofline_answer(name: str, text: str, got) -> tuple[float, str]:
    if not (isinstance(got, tuple | list) and len(got) == 2):
        raise ExerciseFailed(f"{name}: {text} returned {got!r}; return a pair "
                             "(seconds, 'compute' or 'memory').")
    seconds = expect_real(name, text + "[0]", got[0])
    bound = str(got[1]).lower().removesuffix("-bound").removesuffix(" bound")
    return seconds, bound


@exercise(fallback=matmul_roofline, fallback_name="llmlab.course.checks.lab00.matmul_roofline")
def exercise_matmul_roofline(roofline) -> None:
    """Exercise 4: matmul_roofline(m, n, k, spec, dtype) -> (seconds, "compute" | "memory")."""
    name = "Exercise 4 (the roofline of a matmul)"
    for m, n, k, spec, dtype in _roofline_cases():
        text = f"matmul_roofline({m}, {n}, {k}, <{spec.name}>, {dtype!r})"
        got = call(name, roofline, m, n, k, spec, dtype)
        expected = matmul_roofline(m, n, k, spec, dtype)
        if expected is None:
            if got is not None:
                raise ExerciseFailed(f"{name}: the {spec.name} has no {dtype} math, so {text} "
                                     f"must return None (no peak, no estimate), not {got!r}.")
            continue
        seconds, bound = _read_roofline_answer(name, text, got)
        if not is_close(seconds, expected[0], 1e-6):
            hint = _roofline_hint(seconds, m, n, k, spec, dtype)
            raise ExerciseFailed(f"{name}: {text} returned {real_number(got[0])!r} s, expected "
                                 f"about {expected[0]:.6g} s. {hint}".strip())
        if bound != expected[1]:
            raise ExerciseFailed(
                f"{name}: {text} said {got[1]!r}, expected {expected[1]!r}: the bound is whichever "
                "of the compute time and the memory time is longer."
            )
    passed(name, "one token through a 4096 x 4096 layer is memory-bound on an H100; 8192^3 is "
           "compute-bound")


# ---------------------------------------------------------- Exercise 5: this machine's roofline

CACHE_BYTES = 32 * 2**20  # the fake machine's cache: data that fits is moved 4x faster
CACHE_SPEEDUP = 4
TILE = 128  # a compute unit of the fake machine works on one TILE x TILE block of a matmul's output
# Operations that make a tensor: inside a timed function their allocation would be timed too.
ALLOCATES = ("rand", "empty", "zeros", "ones", "full", "normal", "uniform", "arange", "clone")
# Operations that only relabel a tensor's memory (a view): they move no bytes, and einsum wraps
# its matmul in several of them.
VIEWS = ("view", "_unsafe_view", "_reshape_alias", "permute", "transpose", "t", "expand",
         "unsqueeze", "squeeze", "as_strided", "alias", "detach", "select", "slice", "narrow",
         "diagonal", "unbind", "split")


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _moved(op: Op) -> int:
    """Bytes an operation reads and writes: an in-place one (copy_, fill_) writes its first
    argument instead of reading it."""
    read = op.inputs[1:] if op.name.endswith("_") else op.inputs
    return _bytes(read) + _bytes([op.output] if op.output is not None else [])


def _flops(op: Op) -> int:
    """2 FLOPs per multiply-add of a matmul: every output element is a dot product of length k."""
    return 2 * op.output.numel() * op.inputs[-1].shape[-2] if op.name in MATMUL_OPS else 0


class RecordShapes(RecordOps):
    """RecordOps that gives each matmul a result of the right shape and dtype without computing
    it: the fake machine charges a matmul by its shapes alone, and multiplying for real (a 2048^3
    bf16 matmul takes minutes on a CPU that emulates bf16) would only slow the check down."""

    def run(self, func, args, kwargs):
        if func.overloadpacket.__name__ not in MATMUL_OPS:
            return func(*args, **kwargs)
        # On meta tensors the matmul still refuses wrong shapes and mixed dtypes, as it would
        # for real.
        meta_args, meta_kwargs = tree_map_only(torch.Tensor, lambda t: t.to("meta"),
                                               (args, kwargs))
        shaped = func(*meta_args, **meta_kwargs)
        return torch.empty(shaped.shape, dtype=shaped.dtype, device=args[0].device)


class FakeMachine:
    """Runs a timed function and says how long this machine would take: every operation at its
    roofline, the slower of its FLOPs at the peak of its dtype (`tflops`) and its bytes at
    `bandwidth_gbs` (4x that bandwidth for data that fits in its cache). A matmul reaches the
    peak only with a TILE x TILE block of output for each of the `units` compute units (cores,
    SMs); with fewer blocks the idle units' share of the peak is lost, as on a real machine."""

    def __init__(self, bandwidth_gbs: float, tflops: dict[torch.dtype, float], units: int):
        self.bandwidth_gbs, self.tflops, self.units = bandwidth_gbs, tflops, units
        self.calls: list[list[Op]] = []

    def ridge(self, dtype: torch.dtype) -> float:
        return self.tflops[dtype] * 1e12 / (self.bandwidth_gbs * 1e9)

    def at_peak_s(self, op: Op) -> float:
        """The time of an operation's FLOPs at the peak of its dtype, every unit busy."""
        return _flops(op) / (self.tflops[op.output.dtype] * 1e12) if _flops(op) else 0.0

    def seconds(self, op: Op) -> float:
        moved = _moved(op)
        bandwidth = self.bandwidth_gbs * 1e9 * (CACHE_SPEEDUP if moved < CACHE_BYTES else 1)
        compute_s = self.at_peak_s(op)
        if compute_s:
            *batch, rows, columns = op.output.shape
            blocks = math.prod(batch) * math.ceil(rows / TILE) * math.ceil(columns / TILE)
            compute_s /= min(1.0, blocks / self.units)
        return max(compute_s, moved / bandwidth)

    def timer(self, fn, **ignored) -> float:
        with RecordShapes() as recorder:
            fn()
        ops = [op for op in recorder.ops if op.name not in VIEWS]
        self.calls.append(ops)
        return sum(self.seconds(op) for op in ops)


def measure_roofline(timer, device, dtype) -> tuple[float, float, float]:
    """llmlab's answer to Exercise 5 (the lab uses it when the exercise is not done): the
    bandwidth of a large copy, the FLOP/s of a large matmul, and the ridge point between them."""
    source = torch.ones(2**25, dtype=dtype, device=device)  # 64-128 MB: far larger than caches
    target = torch.empty_like(source)
    bandwidth_gbs = 2 * _bytes([source]) / timer(lambda: target.copy_(source)) / 1e9
    a, b = (torch.ones(2048, 2048, dtype=dtype, device=device) for _ in range(2))
    tflops = matmul_flops(2048, 2048, 2048) / timer(lambda: a @ b) / 1e12
    return bandwidth_gbs, tflops, tflops * 1e12 / (bandwidth_gbs * 1e9)


# (dtype asked for, bandwidth GB/s, TFLOP/s per dtype, compute units): a CPU, a V100 in fp32, an
# H100 in bf16. Each format has its own peak, so an answer that ignores `dtype` measures the wrong
# one (the CPU's and the V100's bf16, which they lack and emulate, are made up).
ROOFLINE_MACHINES = [
    (torch.float32, 40.0, {torch.float64: 0.25, torch.float32: 0.5, torch.bfloat16: 0.2,
                           torch.float16: 0.1}, 16),
    (torch.float32, 900.0, {torch.float64: 7.8, torch.float32: 15.7, torch.bfloat16: 3.9,
                            torch.float16: 125.0}, 80),
    (torch.bfloat16, 3350.0, {torch.float64: 67.0, torch.float32: 67.0, torch.bfloat16: 989.0,
                              torch.float16: 989.0}, 132),
]


def _split_calls(name: str, text: str, calls: list[list[Op]]) -> tuple[list[Op], list[Op]]:
    """The timed memory operations and the timed matmul calls, after checking each call."""
    memory, matmuls = [], []
    for ops in calls:
        makers = _named(ops, ALLOCATES)
        if makers:
            raise ExerciseFailed(
                f"{name}: {text}: a timed function runs {', '.join(makers)}: it makes a tensor, "
                "and the time to allocate it would count as time to move or multiply data. "
                "Make every tensor before timing."
            )
        kinds = {op.name in MATMUL_OPS for op in ops}
        if len(kinds) > 1:
            raise ExerciseFailed(f"{name}: {text}: a timed function mixes a matmul with other "
                                 "work; time the copy and the matmul separately.")
        (matmuls if True in kinds else memory).extend(ops)
    if not memory or not matmuls:
        missing = "a memory copy (nothing but moving bytes)" if not memory else "a matmul"
        raise ExerciseFailed(f"{name}: {text} never timed {missing} with `timer`.")
    return memory, matmuls


def _bandwidth_hint(got: float, machine: FakeMachine, memory: list[Op], dtype) -> str:
    if max(_moved(op) for op in memory) < CACHE_BYTES:
        return (f"Your copy moves {max(_moved(op) for op in memory) / 2**20:.1f} MiB: that fits in "
                "this machine's caches, which are faster than its memory. Copy hundreds of "
                "megabytes, far more than any cache holds.")
    size = torch.empty((), dtype=dtype).element_size()
    wrong = [
        (0.5, "A copy reads every byte and writes it again: count both."),
        (1 / size, "Count bytes, not numbers: each takes element_size() bytes."),
        (1e9 / 2**30, "1 GB is 1e9 bytes, not 2**30."),
        (1e3, "Units: GB/s is 1e9 bytes per second."),
    ]
    return next((text for factor, text in wrong
                 if is_close(got, machine.bandwidth_gbs * factor, 1e-6)), "")


def _tflops_hint(got: float, machine: FakeMachine, matmuls: list[Op], dtype) -> str:
    formats = sorted({str(op.output.dtype) for op in matmuls if op.output.dtype != dtype})
    if formats:
        return (f"Your matmul multiplied {' and '.join(formats)} tensors: each number format has "
                "its own peak; measure the one asked for (`dtype`).")
    if any(machine.at_peak_s(op) < machine.seconds(op) for op in matmuls):
        return ("Your matmul is too small to keep this machine's compute busy: too few blocks of "
                "output to give every compute unit work, or its matrices take longer to move "
                "than to multiply. Measure the peak with a larger one.")
    wrong = [(0.5, "A multiply-add is 2 FLOPs."),
             (1e3, "Units: 1 TFLOP/s is 1e12 FLOP/s.")]
    return next((text for factor, text in wrong
                 if is_close(got, machine.tflops[dtype] * factor, 1e-6)), "")


def _check_machine(name: str, roofline, dtype, bandwidth_gbs: float, peaks, units: int) -> None:
    machine = FakeMachine(bandwidth_gbs, peaks, units)
    tflops, expected_ridge = peaks[dtype], machine.ridge(dtype)
    text = f"measure_roofline(timer, 'cpu', {dtype}) on a machine of {bandwidth_gbs:g} GB/s and " \
           f"{tflops:g} TFLOP/s in {dtype}"
    got = call(name, roofline, machine.timer, torch.device("cpu"), dtype)
    if not (isinstance(got, tuple | list) and len(got) == 3):
        raise ExerciseFailed(f"{name}: {text} returned {got!r}; return three numbers: "
                             "(GB/s, TFLOP/s, ridge in FLOPs per byte).")
    bandwidth, peak, ridge = (expect_real(name, f"{text}[{i}]", v) for i, v in enumerate(got))
    memory, matmuls = _split_calls(name, text, machine.calls)
    if not is_close(bandwidth, bandwidth_gbs, 1e-6):
        hint = _bandwidth_hint(bandwidth, machine, memory, dtype)
        raise ExerciseFailed(f"{name}: {text} measured {bandwidth:.6g} GB/s, expected "
                             f"{bandwidth_gbs:g}. {hint}".strip())
    if not is_close(peak, tflops, 1e-6):
        raise ExerciseFailed(f"{name}: {text} measured {peak:.6g} TFLOP/s, expected {tflops:g}. "
                             f"{_tflops_hint(peak, machine, matmuls, dtype)}".strip())
    if not is_close(ridge, expected_ridge, 1e-6):
        hint = ("That is bytes per FLOP: the ridge is the FLOPs a byte must feed for compute, "
                "not memory, to set the time." if is_close(ridge, 1 / expected_ridge, 1e-6) else
                "Put both rates in the same units (FLOP/s and bytes/s) before dividing.")
        raise ExerciseFailed(f"{name}: {text} returned the ridge {ridge:.6g}, expected "
                             f"{expected_ridge:.6g} FLOPs per byte. {hint}")


@exercise(fallback=measure_roofline,
          fallback_name="llmlab.course.checks.lab00.measure_roofline")
def exercise_measure_roofline(roofline) -> None:
    """Exercise 5: measure_roofline(timer, device, dtype) -> (GB/s, TFLOP/s, FLOPs per byte)."""
    name = "Exercise 5 (this machine's roofline)"
    for machine in ROOFLINE_MACHINES:
        _check_machine(name, roofline, *machine)
    passed(name, "bandwidth from a copy larger than the caches, the peak from a compute-bound "
                 "matmul, and the ridge between them, on three fake machines")


NOTEBOOK = "00_environment.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "honest_time": exercise_honest_time,
    "matmul_tflops": exercise_matmul_tflops,
    "training_dtype": exercise_training_dtype,
    "matmul_roofline": exercise_matmul_roofline,
    "measure_roofline": exercise_measure_roofline,
}
