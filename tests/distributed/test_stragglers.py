"""Straggler detection: the pure rule on made-up times; real ranks, one slowed on purpose on
a fake clock (the real-time demonstration is Lab 05's)."""

import math
from functools import partial

import pytest
from helpers.fake_clock import ManualClock

from llmlab.distributed import launch
from llmlab.distributed.stragglers import (
    Straggler,
    find_stragglers,
    find_stragglers_over_steps,
    gather_rank_values,
    gather_step_times,
    straggler_demo,
)


def test_equal_ranks_flag_nobody():
    assert find_stragglers([0.5, 0.5, 0.5, 0.5]) == []


def test_the_slow_rank_is_flagged_with_a_reason():
    flagged = find_stragglers([1.0, 1.0, 1.5, 1.0])
    assert flagged == [Straggler(rank=2, seconds=1.5, median_seconds=1.0)]
    assert flagged[0].slowdown == pytest.approx(0.5)
    assert flagged[0].reason == (
        "rank 2 took 1.5 s per step, 50% slower than the median rank (1 s)"
    )


def test_several_stragglers_come_slowest_first():
    assert [s.rank for s in find_stragglers([1.0, 2.0, 1.0, 3.0, 1.0])] == [3, 1]


def test_the_threshold_boundary_is_not_flagged_and_just_past_it_is():
    # 1.25 = 1.0 * (1 + 0.25) exactly in binary floating point: on the boundary, not past it
    assert find_stragglers([1.0, 1.0, 1.25], threshold=0.25) == []
    assert [s.rank for s in find_stragglers([1.0, 1.0, 1.2501], threshold=0.25)] == [2]
    assert find_stragglers([1.0, 1.0, 1.2501], threshold=0.3) == []


def test_a_fast_rank_is_not_a_straggler_and_one_rank_is_its_own_median():
    assert find_stragglers([1.0, 1.0, 0.1]) == []
    assert find_stragglers([7.0]) == []


def test_zero_median_flags_any_slower_rank():
    flagged = find_stragglers([0.0, 0.0, 0.1])
    assert [s.rank for s in flagged] == [2] and flagged[0].slowdown == math.inf


@pytest.mark.parametrize(
    ("times", "threshold", "error", "message"),
    [
        ([], 0.2, ValueError, "no step times"),
        ([1.0, -0.1], 0.2, ValueError, r"finite and >= 0.*\{1: -0.1\}"),
        ([1.0, math.nan, 1.0], 0.2, ValueError, r"\{1: nan\}"),
        ([1.0, math.inf], 0.2, ValueError, "finite"),
        ([1.0, 1.0], 0.0, ValueError, "positive, finite"),
        ([1.0, 1.0], -0.2, ValueError, "positive, finite"),
        ([1.0, 1.0], math.nan, ValueError, "positive, finite"),
        ([1.0, 1.0], "20%", TypeError, "a number such as 0.2"),
    ],
)
def test_bad_input_says_what_is_wrong(times, threshold, error, message):
    with pytest.raises(error, match=message):
        find_stragglers(times, threshold)


def test_alone_there_is_nothing_to_gather_and_the_demo_says_how_to_launch():
    assert gather_step_times(0.1) is None
    with pytest.raises(RuntimeError, match="launch"):
        straggler_demo(slow_rank=0)


def _gather_rank_times():
    import torch.distributed as dist

    return gather_step_times(0.1 * (dist.get_rank() + 1))


def test_gather_gives_every_rank_all_times_in_rank_order():
    results = launch(_gather_rank_times, nprocs=3, timeout_s=60)
    assert results == [pytest.approx([0.1, 0.2, 0.3])] * 3


def test_a_rank_slowed_on_purpose_is_the_only_one_flagged_on_every_rank():
    # Every step's work reads as 50 ms on the fake clock; rank 2 sleeps 0.3 s more on it.
    clock = ManualClock(tick=0.05)
    demo = partial(straggler_demo, clock=clock, sleep=clock.sleep)
    results = launch(demo, nprocs=3, args=(2, 0.3, 5), timeout_s=60)
    assert results == [[pytest.approx([0.05, 0.05, 0.35])] * 5] * 3  # every rank, every step
    slowed = Straggler(rank=2, seconds=pytest.approx(0.35), median_seconds=pytest.approx(0.05))
    assert find_stragglers_over_steps(results[0]) == [slowed]


def test_the_same_run_without_slowing_flags_nobody():
    clock = ManualClock(tick=0.05)
    demo = partial(straggler_demo, clock=clock, sleep=clock.sleep)
    history = launch(demo, nprocs=3, args=(None, 0.3, 5), timeout_s=60)[0]
    assert find_stragglers_over_steps(history) == []


def test_a_slow_rank_outside_the_group_is_refused():
    with pytest.raises(Exception, match=r"slow_rank must be None or a rank in 0\.\.1, got 5"):
        launch(straggler_demo, nprocs=2, args=(5,), timeout_s=60)


def test_a_straggler_can_be_asked_to_cost_seconds_too():
    assert [s.rank for s in find_stragglers([1e-5, 1e-5, 5e-5])] == [2]  # 5x, but 40 us
    assert find_stragglers([1e-5, 1e-5, 5e-5], min_excess_seconds=1e-3) == []
    assert [s.rank for s in find_stragglers([0.1, 0.1, 0.5], min_excess_seconds=0.3)] == [2]


def _gather_readings():
    import torch.distributed as dist

    rank = dist.get_rank()
    return gather_rank_values([rank * 0.5, None if rank == 1 else 70.0 + rank])


def test_gather_rank_values_keeps_rank_order_and_missing_readings():
    results = launch(_gather_readings, nprocs=3, timeout_s=60)
    assert results == [[[0.0, 70.0], [0.5, None], [1.0, 72.0]]] * 3
    assert gather_rank_values([1.0]) is None  # alone: nothing to gather


def test_over_steps_a_rank_is_its_median_step_so_one_disturbed_step_flags_nobody():
    steady = [[1.0, 1.0, 1.0]] * 4
    assert find_stragglers_over_steps([*steady, [1.0, 5.0, 1.0]]) == []
    flagged = find_stragglers_over_steps([[1.0, 1.0, 1.5]] * 4 + [[1.0, 1.0, 1.0]])
    assert flagged == [Straggler(2, 1.5, 1.0)]


@pytest.mark.parametrize(
    ("steps", "message"),
    [([], "no step times"), ([[]], "no step times"),
     ([[1.0, 1.0], [1.0]], r"one time per rank \(2 in step 0\); got \{1: 1\}"),
     ([[1.0, 1.0], [1.0, math.nan]], r"step 1: .*\{1: nan\}")],
)
def test_over_steps_bad_input_names_the_step(steps, message):
    with pytest.raises(ValueError, match=message):
        find_stragglers_over_steps(steps)
