"""How sure is a score? The paired bootstrap (Koehn 2004) over a test set.

A test set is one sample of the sentences a system could be asked about; another sample would
give another score. The bootstrap imitates drawing new test sets: draw as many sentences as the
test set has, with replacement, score the draw, and repeat. The spread of those scores is the
spread a fresh test set would show: its middle 95% is a confidence interval.

To compare two systems, draw the *same* sentences for both ("paired") and look at the difference
of their scores: most of the luck of a draw (easy sentences, hard ones) is shared by both and
cancels. The interval and the p-value of that difference come from one procedure, the percentile
bootstrap: the interval holds the middle 95% of the drawn differences, and the two-sided p-value
is the level at which that interval would start to exclude 0, so the 95% interval excludes 0
exactly when p < 0.05: a table cannot show an interval clear of 0 beside a large p, or the
reverse. (sacrebleu's `--paired-bs` takes its p-value from another procedure, the absolute drawn
differences shifted to mean zero, so its p-value and an interval can disagree.)

Why percentiles rather than BCa (bias-corrected and accelerated): one procedure gives both
numbers, and it is simple enough to write by hand. BCa also corrects the interval for the bias
and skew of the draws (BLEU near 0 is skewed), but it needs a jackknife over the test set: the
metric recomputed once per sentence left out.

Any metric works that takes (hypotheses, references) and returns a number: corpus BLEU, chrF,
accuracy. The metric is recomputed on each draw (corpus BLEU is not a mean of sentence scores).
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

Metric = Callable[[Sequence, Sequence], float]


@dataclass(frozen=True)
class Interval:
    score: float  # on the whole test set
    low: float
    high: float
    confidence: float  # 0.95 for a 95% interval

    def __str__(self) -> str:
        return f"{self.score:.2f} [{self.low:.2f}, {self.high:.2f}]"


@dataclass(frozen=True)
class PairedComparison:
    a: Interval
    b: Interval
    difference: Interval  # score of b minus score of a, with its interval
    p_value: float  # two-sided, from the same draws and procedure as the interval
    samples: int
    # b - a on each draw (for a histogram); left out of == and hash, since an array compared
    # with == gives an array, not a truth value.
    differences: np.ndarray = field(compare=False, repr=False)


def resample_indices(size: int, samples: int, seed: int) -> np.ndarray:
    """(samples, size) indices drawn with replacement: the same draws for every system."""
    if size < 1 or samples < 1:
        raise ValueError(f"need at least one item and one sample, got {size} and {samples}")
    return np.random.default_rng(seed).choice(size, size=(samples, size), replace=True)


def resampled_scores(metric: Metric, hypotheses, references, indices: np.ndarray) -> np.ndarray:
    """The metric on each draw (a row of `indices`), recomputed from the draw's sentences."""
    return np.array(
        [metric([hypotheses[i] for i in draw], [references[i] for i in draw]) for draw in indices],
        dtype=float,
    )


def _ends(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    """The middle `confidence` of the draws: from the k-th smallest draw to the k-th largest, k
    the share of one tail times the number of draws, rounded up. The ends are draws themselves,
    not points interpolated between two (np.percentile's default), so that the p-value of
    `percentile_test` agrees with the interval exactly."""
    ordered = np.sort(draws)
    # round: (1 - 0.95) / 2 * 1000 is 25.00000000000002 in floating point, and k must be 25
    k = math.ceil(round((1 - confidence) / 2 * ordered.size, 9))
    return float(ordered[k - 1]), float(ordered[-k])


def _interval(score: float, draws: np.ndarray, confidence: float) -> Interval:
    return Interval(score, *_ends(draws, confidence), confidence)


def percentile_test(
    differences: np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(low, high, p_value) of drawn differences b - a by the percentile bootstrap.

    The interval holds the middle `confidence` of the differences. The two-sided p-value is twice
    the share of draws on the smaller side of 0, at most 1: the level at which the interval would
    start to exclude 0, so the 95% interval excludes 0 exactly when p < 0.05. A draw equal to 0
    counts on both sides, so identical systems (every difference 0) get p = 1. p = 0 says that
    no draw reached 0: read it as p < 2 / (number of draws)."""
    differences = np.asarray(differences, dtype=float)
    low, high = _ends(differences, confidence)
    smaller_side = min(np.mean(differences <= 0), np.mean(differences >= 0))
    return low, high, float(min(1.0, 2 * smaller_side))


def paired_percentile(
    metric: Metric,
    hypotheses_a: Sequence,
    hypotheses_b: Sequence,
    references: Sequence,
    indices: np.ndarray,
    confidence: float = 0.95,
) -> tuple[np.ndarray, float, float, float]:
    """The paired percentile bootstrap on given draws (the rows of `indices`, as
    `resample_indices` makes them): a and b scored on the same rows of each draw. Returns the
    drawn differences metric(b) - metric(a) and their (low, high, p_value) (`percentile_test`)."""
    differences = resampled_scores(metric, hypotheses_b, references, indices) - resampled_scores(
        metric, hypotheses_a, references, indices
    )
    return (differences, *percentile_test(differences, confidence))


def bootstrap_interval(
    metric: Metric,
    hypotheses: Sequence,
    references: Sequence,
    samples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """The score of one system with its bootstrap confidence interval (percentile method)."""
    _check(hypotheses, references, confidence)
    indices = resample_indices(len(hypotheses), samples, seed)
    draws = resampled_scores(metric, hypotheses, references, indices)
    return _interval(metric(hypotheses, references), draws, confidence)


def paired_bootstrap(
    metric: Metric,
    hypotheses_a: Sequence,
    hypotheses_b: Sequence,
    references: Sequence,
    samples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedComparison:
    """Systems a and b on the same test set: each score with its interval, the difference b - a
    with its interval and p-value (`percentile_test`), and the drawn differences."""
    _check(hypotheses_a, references, confidence)
    if len(hypotheses_b) != len(references):
        raise ValueError(f"{len(hypotheses_b)} hypotheses of b for {len(references)} references")
    indices = resample_indices(len(references), samples, seed)
    # Not paired_percentile: each system's own draws also give its own interval, so each is
    # scored once.
    draws_a = resampled_scores(metric, hypotheses_a, references, indices)
    draws_b = resampled_scores(metric, hypotheses_b, references, indices)
    differences = draws_b - draws_a
    differences.setflags(write=False)  # frozen like the rest of the comparison
    low, high, p_value = percentile_test(differences, confidence)
    score_a, score_b = metric(hypotheses_a, references), metric(hypotheses_b, references)
    return PairedComparison(
        _interval(score_a, draws_a, confidence),
        _interval(score_b, draws_b, confidence),
        Interval(score_b - score_a, low, high, confidence),
        p_value,
        samples,
        differences,
    )


def _check(hypotheses: Sequence, references: Sequence, confidence: float) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (0.95 for 95%), got {confidence}")
