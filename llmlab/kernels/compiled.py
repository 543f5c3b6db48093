"""torch.compile, measured: what compiling costs (the first call: tracing, code generation and
the compiler), what it buys (the median time per call against eager, in rounds that show the
noise), where tracing stops (graph breaks) and how often it compiles again (a new shape fails
the compiled code's guards)."""

import contextlib
import functools
import logging
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

from llmlab.timing import Timing, speedups, time_fn, time_rounds

MODES = ("default", "max-autotune", "reduce-overhead")


@dataclass(frozen=True)
class GraphBreaks:
    """The graphs TorchDynamo splits a function into, and why it stopped tracing each time."""

    graphs: int
    reasons: tuple[str, ...]  # one line per break: the reason, then where in the user's code

    @property
    def breaks(self) -> int:
        """The places tracing stopped (a break with no tensor work after it adds no graph)."""
        return len(self.reasons)


@contextlib.contextmanager
def _dynamo_warnings_hidden() -> Iterator[None]:
    # Dynamo logs a warning at each `.item()` break; `explain` reports every break itself.
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def graph_breaks(fn: Callable, *args, **kwargs) -> GraphBreaks:
    """Trace `fn(*args, **kwargs)` with TorchDynamo (no code is generated) and report the graphs
    it splits into. Each break hands control back to Python, and nothing fuses across it."""
    torch._dynamo.reset()  # a fresh cache: a function traced before would be reused, not explained
    with _dynamo_warnings_hidden():
        explanation = torch._dynamo.explain(fn)(*args, **kwargs)
    reasons = []
    for reason in explanation.break_reasons:
        frame = reason.user_stack[-1] if reason.user_stack else None
        where = f" (line {frame.lineno}: {(frame.line or '').strip()})" if frame else ""
        text = reason.reason.splitlines()[0]
        if text.startswith("generic_jump"):  # dynamo's name for it says little to a reader
            text = "a Python branch on a tensor's value"
        reasons.append(text + where)
    return GraphBreaks(explanation.graph_count, tuple(reasons))


def count_compiles(
    fn: Callable, calls: Sequence[Sequence], *, dynamic: bool | None = None, backend: str = "eager"
) -> int:
    """Call torch.compile(fn) once per argument tuple in `calls`, in order, and return how many
    times it compiled: 1, plus one per recompile (the compiled code's guards, on shapes and
    dtypes among others, failed). `dynamic` is torch.compile's: None compiles for the first
    shape, then once more with the dimension that changed made symbolic; False recompiles for
    every new shape; True makes every dimension symbolic from the start. The default backend,
    "eager", traces without generating code: the same count in a fraction of inductor's time."""
    torch._dynamo.reset()  # compiled code from an earlier call would be reused and not counted
    counter = CompileCounterWithBackend(backend)  # torch's own counter: it wraps the backend
    compiled = torch.compile(fn, backend=counter, dynamic=dynamic)
    for args in calls:
        compiled(*args)
    return counter.frame_count


@dataclass(frozen=True)
class CompileTiming:
    """The first compiled call, then eager and compiled timed in turn, round after round."""

    compile_s: float  # the first compiled call: tracing, code generation and the compiler
    cache_hits: int  # graphs inductor read from its on-disk cache (a rerun) instead of compiling
    eager: tuple[Timing, ...]  # one per round (timing.time_rounds)
    compiled: tuple[Timing, ...]

    @property
    def eager_s(self) -> float:
        return statistics.median(t.median_s for t in self.eager)

    @property
    def compiled_s(self) -> float:
        return statistics.median(t.median_s for t in self.compiled)

    @property
    def round_speedups(self) -> tuple[float, ...]:
        """Eager's time over compiled's in each round: their spread is the timing's noise."""
        return speedups(self.eager, self.compiled)

    @property
    def speedup(self) -> float:
        return statistics.median(self.round_speedups)

    def speedup_line(self) -> str:
        """'1.02x (0.97-1.06x in 3 rounds)'."""
        low, high = min(self.round_speedups), max(self.round_speedups)
        return f"{self.speedup:.2f}x ({low:.2f}-{high:.2f}x in {len(self.round_speedups)} rounds)"


def time_compiled(
    eager_fn: Callable[[], object],
    compiled_fn: Callable[[], object],
    *,
    warmup: int = 2,
    repeats: int = 5,
    rounds: int = 3,
    device: torch.device | str | None = None,
) -> CompileTiming:
    """Time `compiled_fn`'s first call (it compiles), then both functions in `rounds` rounds of
    `llmlab.timing.time_rounds`. Call it before `compiled_fn` has run once."""
    hits = counters["inductor"]["fxgraph_cache_hit"]
    first = time_fn(compiled_fn, warmup=0, repeats=1, device=device)  # one call, the device's clock
    cache_hits = counters["inductor"]["fxgraph_cache_hit"] - hits
    timings = time_rounds({"eager": eager_fn, "compiled": compiled_fn}, rounds=rounds,
                          warmup=warmup, repeats=repeats, device=device)
    return CompileTiming(first.median_s, cache_hits, tuple(timings["eager"]),
                         tuple(timings["compiled"]))


def time_modes(
    module: torch.nn.Module,
    inputs: Sequence[torch.Tensor],
    *,
    modes: Sequence[str] = MODES,
    repeats: int = 10,
) -> Mapping[str, CompileTiming]:
    """One CompileTiming per torch.compile mode of `module(*inputs)` (no gradients), on the GPU
    the module is on: "max-autotune" benchmarks kernel variants while it compiles, and
    "reduce-overhead" records the step as a CUDA graph and replays it, one launch for all."""
    device = next(module.parameters()).device
    if device.type != "cuda":
        raise ValueError(f"the compile modes are compared on a CUDA GPU; the module is on "
                         f"{device} (reduce-overhead's CUDA graphs need one)")
    results = {}
    with torch.no_grad():
        for mode in modes:
            torch._dynamo.reset()  # each mode compiles from scratch, and is timed doing so
            compiled = torch.compile(module, mode=mode)
            results[mode] = time_compiled(functools.partial(module, *inputs),
                                          functools.partial(compiled, *inputs),
                                          repeats=repeats, device=device)
    return results
