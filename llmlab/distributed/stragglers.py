"""Straggler detection: a rank whose steps take longer than the others' holds every rank back.

In synchronous training every rank waits at each collective for the slowest one, so one slow GPU,
a throttled node or a busy host makes the whole job run at its pace. To spot it, each rank times
its own work up to the first collective (after it, every rank's wall time is the slowest one's),
the times are gathered to all ranks, and a rank slower than the median rank by more than a
relative threshold is flagged. The median, not the mean: one straggler drags the mean towards
itself and could hide, but it moves the median of three or more ranks very little.
"""

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Straggler:
    rank: int
    seconds: float  # this rank's step time
    median_seconds: float  # the median rank's step time

    @property
    def slowdown(self) -> float:
        """How much slower than the median, relative: 0.5 means 50 % slower."""
        if self.median_seconds == 0:
            return math.inf
        return self.seconds / self.median_seconds - 1

    @property
    def reason(self) -> str:
        return (
            f"rank {self.rank} took {self.seconds:.3g} s per step, {self.slowdown:.0%} slower than "
            f"the median rank ({self.median_seconds:.3g} s)"
        )


def find_stragglers(
    step_seconds_by_rank: Sequence[float], threshold: float = 0.2, min_excess_seconds: float = 0.0
) -> list[Straggler]:
    """The ranks whose step time exceeds the median rank's by more than `threshold` (0.2: 20 %),
    slowest first; a rank exactly at the boundary is not flagged. `min_excess_seconds` also asks
    for that many seconds more than the median: a relative rule alone flags microseconds of
    jitter when the times measured are themselves tiny.

    With two ranks the median is their mean, so the slower one is flagged only when it is more
    than (1 + threshold) / (1 - threshold) times the faster one; three ranks or more tell more.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise TypeError(f"threshold must be a number such as 0.2 (20 % slower), got {threshold!r}")
    if not threshold > 0 or not math.isfinite(threshold):
        raise ValueError(
            f"threshold must be a positive, finite fraction such as 0.2 (20 % slower than the "
            f"median), got {threshold!r}"
        )
    times = list(step_seconds_by_rank)
    if not times:
        raise ValueError("no step times: pass one step time in seconds per rank")
    _check_times(times, "rank")
    median = statistics.median(times)
    flagged = [Straggler(rank, t, median) for rank, t in enumerate(times)
               if t > median * (1 + threshold) and t - median > min_excess_seconds]
    return sorted(flagged, key=lambda straggler: straggler.seconds, reverse=True)


def _check_times(times: Sequence[float], key: str) -> None:
    bad = {index: t for index, t in enumerate(times) if not (math.isfinite(t) and t >= 0)}
    if bad:
        raise ValueError(
            f"step times must be finite and >= 0 seconds; got {bad} ({key}: value). A NaN or a "
            "negative time means the step was not timed: check the timer around the step."
        )


def find_stragglers_over_steps(
    step_seconds: Sequence[Sequence[float]], threshold: float = 0.2
) -> list[Straggler]:
    """`find_stragglers` over several steps: `step_seconds[step][rank]`, as gathered each step.
    A rank's time is its median over the steps, so one step disturbed by the operating system
    (or a checkpoint, a garbage collection) flags nobody; a rank slow at every step stands out."""
    rows = [list(row) for row in step_seconds]
    if not rows or not rows[0]:
        raise ValueError("no step times: pass one row per step, one time in seconds per rank")
    ragged = {step: len(row) for step, row in enumerate(rows) if len(row) != len(rows[0])}
    if ragged:
        raise ValueError(f"every step needs one time per rank ({len(rows[0])} in step 0); got "
                         f"{ragged} (step: times)")
    for step, row in enumerate(rows):
        try:
            _check_times(row, "rank")
        except ValueError as error:
            raise ValueError(f"step {step}: {error}") from None
    by_rank = [statistics.median(column) for column in zip(*rows, strict=True)]
    return find_stragglers(by_rank, threshold)


def gather_step_times(seconds: float) -> list[float] | None:
    """Every rank's `seconds` (its last step time), in rank order, on every rank; None when this
    process runs alone (no process group). Every rank of the group must call it."""
    gathered = gather_rank_values([seconds])
    return None if gathered is None else [row[0] for row in gathered]


def gather_rank_values(values: Sequence[float | None]) -> list[list[float | None]] | None:
    """Every rank's `values` (a few numbers, the same count on each rank; None for a reading a
    rank lacks), as one list per rank in rank order, on every rank; None when this process runs
    alone (no process group). Every rank of the group must call it.

    The numbers travel as one float64 tensor through `all_gather`: a single small collective that
    gloo and NCCL both run, where `all_gather_object` would pickle and send sizes first (two
    collectives), and under NCCL stage the bytes through the GPU anyway. None travels as NaN.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return None
    # NCCL moves only GPU tensors; gloo, CPU ones. float64: a float32 would round the seconds.
    device = torch.device("cuda", torch.cuda.current_device()) if (
        dist.get_backend() == "nccl") else torch.device("cpu")
    numbers = [math.nan if value is None else float(value) for value in values]
    mine = torch.tensor(numbers, dtype=torch.float64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return [[None if math.isnan(v) else v for v in row.tolist()] for row in everyone]


def _matmul_workload(size: int, repeats: int) -> None:
    """A fixed amount of compute, the same on every rank: `repeats` products of size x size."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    for _ in range(repeats):
        a = torch.tanh(a @ b)  # tanh keeps the values bounded over the repeats


def straggler_demo(
    slow_rank: int | None = None,
    extra_seconds: float = 0.3,
    steps: int = 5,
    size: int = 256,
    repeats: int = 50,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> list[list[float]]:
    """Run under `launch(straggler_demo, nprocs, args=(...))`: each rank does `steps` steps of a
    small matmul workload, `slow_rank` sleeps `extra_seconds` more per step on purpose (None:
    nobody is slowed), and every rank returns the same step times, `[step][rank]` in seconds, for
    `find_stragglers_over_steps`. A step is timed with `clock` and slowed with `sleep`: a test
    passes a fake pair, so its times are exact.

    Each step's time is gathered to all ranks, as a trainer would every step. The default
    workload takes tens of milliseconds, longer than the scheduler's time slices, so ranks
    sharing too few cores share them evenly; a few milliseconds' work measured 20-40 % apart on
    three ranks over two busy cores.
    """
    if not dist.is_initialized():
        raise RuntimeError(
            "straggler_demo runs on several ranks: launch(straggler_demo, nprocs=3, args=(2,))"
        )
    world_size = dist.get_world_size()
    if slow_rank is not None and not 0 <= slow_rank < world_size:
        raise ValueError(
            f"slow_rank must be None or a rank in 0..{world_size - 1}, got {slow_rank}"
        )
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    history = []
    for step in range(steps):
        start = clock()
        _matmul_workload(size, repeats)
        if dist.get_rank() == slow_rank:
            sleep(extra_seconds)
        history.append(gather_step_times(clock() - start))
        if dist.get_rank() == 0:  # one line per step: what a launcher's progress bar counts
            print(f"step {step + 1}/{steps}: " + ", ".join(f"{t:.3f}" for t in history[-1])
                  + " s by rank", flush=True)
    return history
