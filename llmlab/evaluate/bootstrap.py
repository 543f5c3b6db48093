"""How sure is a score? The paired bootstrap (Koehn 2004) over a test set.

A test set is one sample of the sentences a system could be asked about; another sample would
give another score. The bootstrap imitates drawing new test sets: draw as many sentences as the
test set has, with replacement, score the draw, and repeat. The spread of those scores is the
spread a fresh test set would show: its middle 95% is a confidence interval.

To compare two systems, draw the *same* sentences for both ("paired") and look at the difference
of their scores: most of the luck of a draw (easy sentences, hard ones) is shared by both and
cancels. The p-value asks how often a difference as large as the one observed would come up if
the systems were equally good: the drawn differences, shifted to mean zero (that is the "equally
good" world), are compared with the observed one. (sacrebleu's `--paired-bs` draws the same
indices from the same seed, but shifts the *absolute* differences, so its p-values differ a little.)

Any metric works that takes (hypotheses, references) and returns a number: corpus BLEU, chrF,
accuracy. The metric is recomputed on each draw (corpus BLEU is not a mean of sentence scores).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    p_value: float  # two-sided: how often chance alone gives a difference this large
    samples: int


def resample_indices(size: int, samples: int, seed: int) -> np.ndarray:
    """(samples, size) indices drawn with replacement: the same draws for every system."""
    if size < 1 or samples < 1:
        raise ValueError(f"need at least one item and one sample, got {size} and {samples}")
    return np.random.default_rng(seed).choice(size, size=(samples, size), replace=True)


def _interval(score: float, draws: np.ndarray, confidence: float) -> Interval:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Interval(score, float(low), float(high), confidence)


def _scores(metric: Metric, hypotheses, references, indices: np.ndarray) -> np.ndarray:
    return np.array(
        [metric([hypotheses[i] for i in draw], [references[i] for i in draw]) for draw in indices]
    )


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
    draws = _scores(metric, hypotheses, references, indices)
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
    with its interval, and the p-value of that difference (module docstring)."""
    _check(hypotheses_a, references, confidence)
    if len(hypotheses_b) != len(references):
        raise ValueError(f"{len(hypotheses_b)} hypotheses of b for {len(references)} references")
    indices = resample_indices(len(references), samples, seed)
    draws_a = _scores(metric, hypotheses_a, references, indices)
    draws_b = _scores(metric, hypotheses_b, references, indices)
    score_a, score_b = metric(hypotheses_a, references), metric(hypotheses_b, references)
    observed = score_b - score_a
    differences = draws_b - draws_a
    # Shifted to mean zero, the draws show what chance does when neither system is better;
    # +1 on both sides counts the observed test set itself, so p is never exactly 0.
    as_large = np.sum(np.abs(differences - differences.mean()) >= abs(observed))
    p_value = float((as_large + 1) / (samples + 1))
    return PairedComparison(
        _interval(score_a, draws_a, confidence),
        _interval(score_b, draws_b, confidence),
        _interval(observed, differences, confidence),
        p_value,
        samples,
    )


def _check(hypotheses: Sequence, references: Sequence, confidence: float) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (0.95 for 95%), got {confidence}")
