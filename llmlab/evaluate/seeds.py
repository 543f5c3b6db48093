"""How far does the seed move a score? The mean of several training runs, with its interval.

A training run is one draw: its seed picks the starting adapters and the order of the batches,
and another seed gives another score. Two methods differ only if their difference outlasts
that spread, so a method's score is reported as the mean over seeds with a 95% interval of the
mean. With a handful of seeds the interval comes from Student's t distribution (a normal
interval would be too narrow: the spread itself is estimated from the same few runs).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats


@dataclass(frozen=True)
class SeedSpread:
    values: tuple[float, ...]  # one score per seed, in seed order
    mean: float
    half_width: float  # of the interval of the mean: mean ± half_width
    confidence: float

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    @property
    def signal_to_noise(self) -> float:
        """The mean in units of the interval's half-width: at 10 or more a score stands well
        clear of its noise."""
        return math.inf if self.half_width == 0 else abs(self.mean) / self.half_width

    def __str__(self) -> str:
        return f"{self.mean:.2f} ± {self.half_width:.2f}"


def seed_spread(values: Sequence[float], confidence: float = 0.95) -> SeedSpread:
    """The mean of one score over seeds and the half-width of its t interval."""
    values = tuple(float(v) for v in values)
    if len(values) < 2:
        raise ValueError(f"a spread needs at least 2 seeds, got {len(values)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (0.95 for 95%), got {confidence}")
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = stats.t.ppf((1 + confidence) / 2, df=n - 1)  # 2.78 for 5 seeds at 95%
    return SeedSpread(values, mean, float(t) * std / math.sqrt(n), confidence)
