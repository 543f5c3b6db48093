"""The spread of a score over seeds: the mean with a t interval (not a normal one, which is too
narrow for a handful of runs), and a signal-to-noise ratio that says whether a score stands clear
of the seed's noise. Mistakes caught: the population standard deviation (n instead of n - 1),
the normal quantile 1.96 instead of t's, the standard deviation reported instead of the
interval of the mean."""

import math
import statistics

import pytest

from llmlab.evaluate.seeds import seed_spread


def test_five_seeds_give_the_t_interval_of_the_mean():
    values = [0.81, 0.86, 0.79, 0.90, 0.84]
    spread = seed_spread(values)
    # t(0.975, 4 degrees of freedom) = 2.7764, from any table of Student's t
    expected = 2.7764 * statistics.stdev(values) / math.sqrt(5)
    assert spread.mean == pytest.approx(statistics.mean(values))
    assert spread.half_width == pytest.approx(expected, rel=1e-4)
    normal = 1.96 * statistics.stdev(values) / math.sqrt(5)
    population = 2.7764 * statistics.pstdev(values) / math.sqrt(5)
    assert spread.half_width != pytest.approx(normal, rel=1e-2)
    assert spread.half_width != pytest.approx(population, rel=1e-2)
    assert (spread.low, spread.high) == pytest.approx(
        (spread.mean - expected, spread.mean + expected), rel=1e-4)
    assert spread.values == tuple(values)


def test_signal_to_noise_is_the_mean_in_half_widths():
    spread = seed_spread([10.0, 12.0, 11.0])
    assert spread.signal_to_noise == pytest.approx(11.0 / spread.half_width)
    assert seed_spread([3.0, 3.0]).signal_to_noise == math.inf  # no spread at all
    assert str(seed_spread([1.0, 3.0])).startswith("2.00 ± ")


@pytest.mark.parametrize(("values", "confidence", "match"), [
    ([1.0], 0.95, "at least 2 seeds"),
    ([1.0, 2.0], 95, "between 0 and 1"),
])
def test_refuses_what_has_no_spread(values, confidence, match):
    with pytest.raises(ValueError, match=match):
        seed_spread(values, confidence)
