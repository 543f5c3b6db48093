"""Honest timing: warm-up runs first, the GPU's own clock for CUDA work, the median of the
repeats, the functions in turn when several are compared, and a warning when other work on the
machine would distort the numbers.
"""

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Seconds per call over the timed repeats (warm-up runs excluded)."""

    median_s: float
    min_s: float
    max_s: float
    times_s: tuple[float, ...]
    warmup: int


# A notebook whose math threads fill the cores puts the load average at the core count by itself,
# and the machine's small chores a little above it (2.03 on 2 cores, seen in a stored run):
# another process running flat out adds a whole 1.
LOAD_MARGIN = 0.5


def busy_warning(load: float | None = None, cores: int | None = None) -> str | None:
    """A warning when other work competes for the cores, else None. Timings taken while the
    1-minute load average exceeds the core count (by more than LOAD_MARGIN) measure the
    contention, not the code."""
    load = os.getloadavg()[0] if load is None else load
    cores = cores or os.cpu_count() or 1
    if load <= cores + LOAD_MARGIN:
        return None
    return (f"WARNING: this machine is busy (load average {load:.1f} on {cores} cores): the "
            "timings below are slowed by other work. Re-run this cell when the machine is idle.")


def warn_if_busy() -> bool:
    """Print `busy_warning()` if there is one (call it at the top of a timing cell)."""
    warning = busy_warning()
    if warning:
        print(warning)
    return warning is not None


def time_fn(
    fn: Callable[[], object],
    *,
    warmup: int = 2,
    repeats: int = 5,
    device: torch.device | str | None = None,
) -> Timing:
    """Time `fn()`; pass the `device` it runs on so CUDA work is timed on the GPU's own clock."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats=} and {warmup=}")
    device = torch.device("cpu" if device is None else device)
    if device.type != "cuda":
        return _time_repeats(fn, warmup, repeats, _cpu_seconds)
    with torch.cuda.device(device):  # CUDA events and synchronize act on the current GPU
        return _time_repeats(fn, warmup, repeats, _cuda_seconds)


def time_rounds(
    fns: Mapping[str, Callable[[], object]],
    *,
    rounds: int = 3,
    warmup: int = 1,
    repeats: int = 5,
    device: torch.device | str | None = None,
) -> dict[str, list[Timing]]:
    """`time_fn` of each function in each of `rounds` rounds, the functions in turn within a
    round: a slow spell of a shared machine then falls on all of them alike, and the rounds
    show how far one median moves between runs."""
    if rounds < 1:
        raise ValueError(f"need rounds >= 1, got {rounds}")
    timings: dict[str, list[Timing]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            timings[name].append(time_fn(fn, warmup=warmup, repeats=repeats, device=device))
    return timings


def speedups(slow: Sequence[Timing], fast: Sequence[Timing]) -> tuple[float, ...]:
    """How many times faster `fast` ran than `slow` in each paired round of `time_rounds`."""
    if len(slow) != len(fast) or not slow:
        raise ValueError(f"need the same rounds (at least one) of both, got {len(slow)} and "
                         f"{len(fast)}")
    return tuple(s.median_s / f.median_s for s, f in zip(slow, fast, strict=True))


def _time_repeats(
    fn: Callable[[], object], warmup: int, repeats: int, seconds: Callable[[Callable], float]
) -> Timing:
    # The first calls pay for memory allocation, kernel selection and cold caches.
    for _ in range(warmup):
        fn()
    times = tuple(seconds(fn) for _ in range(repeats))
    # The median, because one slow outlier on a shared machine would drag a mean.
    return Timing(statistics.median(times), min(times), max(times), times, warmup)


def _cpu_seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _cuda_seconds(fn: Callable[[], object]) -> float:
    # CUDA kernels are asynchronous: a CPU clock alone would time only their launch,
    # so record events on the GPU stream and wait for the GPU to reach the end one.
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()  # start with an idle GPU, so earlier work is not counted
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000  # elapsed_time is in milliseconds
