import pytest

from llmlab.timing import Timing, busy_warning, speedups, time_fn, time_rounds


def test_time_fn_counts_calls_and_orders_its_statistics():
    calls = []
    timing = time_fn(lambda: calls.append(1), warmup=3, repeats=4)
    assert len(calls) == 3 + 4
    assert len(timing.times_s) == 4
    assert timing.warmup == 3
    assert timing.min_s <= timing.median_s <= timing.max_s


@pytest.mark.parametrize(("warmup", "repeats"), [(0, 0), (-1, 3)])
def test_time_fn_rejects_bad_arguments(warmup, repeats):
    with pytest.raises(ValueError):
        time_fn(lambda: None, warmup=warmup, repeats=repeats)


def test_time_rounds_takes_the_functions_in_turn_within_each_round():
    calls = []
    timings = time_rounds({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                          rounds=3, warmup=1, repeats=2)
    assert calls == (["a"] * 3 + ["b"] * 3) * 3  # a whole round of a, then of b, three times
    assert [len(timings[name]) for name in "ab"] == [3, 3]
    with pytest.raises(ValueError, match="rounds >= 1"):
        time_rounds({"a": lambda: None}, rounds=0)


def timing(median_s: float) -> Timing:
    return Timing(median_s, median_s, median_s, (median_s,), 0)


def test_speedups_pair_the_rounds():
    slow, fast = [timing(0.3), timing(0.4)], [timing(0.2), timing(0.1)]
    assert speedups(slow, fast) == pytest.approx((1.5, 4.0))
    assert speedups(slow, slow) == (1.0, 1.0)
    with pytest.raises(ValueError, match="same rounds"):
        speedups(slow, fast[:1])


def test_busy_warning_only_when_the_load_exceeds_the_cores():
    assert busy_warning(load=1.5, cores=2) is None
    assert busy_warning(load=2.0, cores=2) is None
    assert busy_warning(load=2.4, cores=2) is None  # the notebook's own two threads, and chores
    assert "2.6" in busy_warning(load=2.6, cores=2)
    warning = busy_warning(load=3.2, cores=2)
    assert "busy" in warning and "3.2" in warning and "2 cores" in warning
