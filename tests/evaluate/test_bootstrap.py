"""The paired bootstrap: the same seed gives the same intervals, a one-system interval is as wide
as theory says, pairing cancels the luck both systems share, and the interval and the p-value come
from one procedure, so they never disagree. Mistakes it catches: drawing without replacement (no
spread at all), drawing a's and b's sentences independently (unpaired: a wide difference
interval), a p-value from the draws shifted to mean zero (it can stand beside an interval that
excludes 0, or the reverse), interval ends interpolated between two draws (they can disagree with
the p-value by one draw), k rounded up from 25.00000000000002, the difference taken a - b, a
one-sided p-value (not doubled), one above 1 (not capped), and ties at 0 left out of the p-value
(identical systems would get p = 0)."""

import math

import numpy as np
import pytest

from llmlab.evaluate.bootstrap import (
    bootstrap_interval,
    paired_bootstrap,
    paired_percentile,
    percentile_test,
    resample_indices,
)
from llmlab.evaluate.ngram_bleu import corpus_bleu


def accuracy(hypotheses, references):
    return sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(references)


def two_systems(n=400, seed=1):
    """References 1..n; a is right on ~60% of items, b on the same items plus ~10% more."""
    rng = np.random.default_rng(seed)
    references = list(range(n))
    right_a = rng.random(n) < 0.6
    right_b = right_a | (rng.random(n) < 0.25)
    a = [r if ok else -1 for r, ok in zip(references, right_a, strict=True)]
    b = [r if ok else -1 for r, ok in zip(references, right_b, strict=True)]
    return a, b, references


def close_systems(n, seed):
    """Two systems right on about half of n items each, on different items: a close call."""
    rng = np.random.default_rng(seed)
    references = list(range(n))
    a = [r if rng.random() < 0.5 else -1 for r in references]
    b = [r if rng.random() < 0.5 + rng.uniform(-0.15, 0.15) else -1 for r in references]
    return a, b, references


def few_differences(n, seed):
    """Two systems alike but for a few items (1-6 that b gets right, 0-2 that a does): drawn
    differences that are lopsided and often tied at 0."""
    rng = np.random.default_rng(seed)
    references = list(range(n))
    a = [r if rng.random() < 0.5 else -1 for r in references]
    b = list(a)
    items = rng.permutation(n)
    wins, losses = rng.integers(1, 7), rng.integers(0, 3)
    for i in items[:wins]:
        a[i], b[i] = -1, references[i]
    for i in items[wins : wins + losses]:
        a[i], b[i] = references[i], -1
    return a, b, references


def excludes_zero(low, high):
    return low > 0 or high < 0


def test_same_seed_same_answer_other_seed_other_draws():
    a, b, refs = two_systems()
    first, again = (paired_bootstrap(accuracy, a, b, refs, 200, seed=3) for _ in range(2))
    assert first == again
    assert np.array_equal(first.differences, again.differences)  # not part of ==: an array
    assert bootstrap_interval(accuracy, a, refs, 200, seed=3) != bootstrap_interval(
        accuracy, a, refs, 200, seed=4
    )


def test_one_system_interval_is_as_wide_as_the_binomial_one():
    a, _, refs = two_systems()
    interval = bootstrap_interval(accuracy, a, refs, samples=2000)
    p = interval.score
    expected_width = 2 * 1.96 * math.sqrt(p * (1 - p) / len(refs))
    assert interval.low < p < interval.high
    assert interval.high - interval.low == pytest.approx(expected_width, rel=0.15)


def test_draws_are_with_replacement_and_shared():
    indices = resample_indices(50, 100, seed=0)
    assert indices.shape == (100, 50)
    assert all(len(set(row)) < 50 for row in indices)  # without replacement: a permutation
    without_replacement = np.stack([np.random.default_rng(0).permutation(50)] * 100)
    assert all(len(set(row)) == 50 for row in without_replacement)  # the mistake, caught


def test_pairing_cancels_the_luck_both_systems_share():
    a, b, refs = two_systems()
    result = paired_bootstrap(accuracy, a, b, refs, samples=1000)
    width = result.difference.high - result.difference.low
    assert result.difference.score == pytest.approx(result.b.score - result.a.score)
    assert 0 < result.difference.low  # b is better on every item where they differ
    assert width < 0.8 * (result.a.high - result.a.low)
    # The mistake: a and b drawn independently; their difference is then about sqrt(2) times as
    # uncertain as one system's score, not less.
    draws_a = resample_indices(len(refs), 1000, seed=0)
    draws_b = resample_indices(len(refs), 1000, seed=1)
    unpaired = [accuracy([b[i] for i in jb], [refs[i] for i in jb])
                - accuracy([a[i] for i in ja], [refs[i] for i in ja])
                for ja, jb in zip(draws_a, draws_b, strict=True)]
    unpaired_width = np.percentile(unpaired, 97.5) - np.percentile(unpaired, 2.5)
    assert unpaired_width > 1.2 * (result.a.high - result.a.low)


@pytest.mark.parametrize("systems", [close_systems, few_differences])
def test_the_interval_excludes_0_exactly_when_p_is_below_the_level(systems):
    """On close calls and on lopsided draws, where the two numbers are near their threshold: a
    p-value from the draws shifted to mean zero disagrees with the interval here (an interval
    clear of 0 beside p = 0.06)."""
    verdicts = set()
    for seed in range(60):
        a, b, refs = systems(n=int(np.random.default_rng(seed).integers(10, 60)), seed=seed)
        for samples, confidence, level in ((200, 0.95, 0.05), (500, 0.9, 0.1)):
            c = paired_bootstrap(accuracy, a, b, refs, samples, confidence, seed=seed)
            excluded = excludes_zero(c.difference.low, c.difference.high)
            assert excluded == (c.p_value < level), (seed, samples, c)
            verdicts.add(excluded)
    assert verdicts == {True, False}  # both kinds of case were met


def test_the_agreement_holds_at_the_boundary_draw_by_draw():
    """Exactly k - 1, k and k + 1 draws at or below 0 (k the draws in a tail), with and without
    ties at 0: the cases where a percentile interpolated between two draws, or a k rounded the
    wrong way, would disagree with the p-value."""
    rng = np.random.default_rng(0)
    for samples in (10, 37, 200, 500, 1000):
        k = math.ceil(0.025 * samples)
        for zeros in (0, 1, 3):
            for at_or_below in range(max(zeros, k - 1), k + 2):
                negative = -rng.uniform(0.01, 1, at_or_below - zeros)
                positive = rng.uniform(0.01, 1, samples - at_or_below)
                differences = rng.permutation(np.concatenate([negative, np.zeros(zeros), positive]))
                for sign in (1, -1):  # the lower end, then the upper
                    low, high, p = percentile_test(sign * differences)
                    assert excludes_zero(low, high) == (p < 0.05), (samples, zeros, at_or_below)
                    assert low in sign * differences and high in sign * differences


def test_the_ends_are_the_k_th_smallest_and_largest_draws():
    low, high, _ = percentile_test(np.arange(1000.0))  # draws 0, 1, ..., 999
    assert (low, high) == (24, 975)  # 25 draws at or below low, 25 at or above high
    assert percentile_test(np.array([3.0, 1.0, 2.0]))[:2] == (1, 3)  # under 1 draw a tail: k = 1


def test_identical_systems_give_p_1_and_the_interval_0_0():
    a, _, refs = two_systems()
    same = paired_bootstrap(accuracy, a, list(a), refs, samples=500)
    assert same.difference.score == same.difference.low == same.difference.high == 0
    assert same.p_value == 1.0  # the ties at 0 count on both sides
    assert not same.differences.any()


def test_a_clearly_better_system_gets_p_at_its_floor():
    a, b, refs = two_systems()
    better = paired_bootstrap(accuracy, a, b, refs, samples=500)
    assert better.differences.min() > 0  # no draw reached 0 ...
    assert better.p_value == 0.0  # ... so p < 2 / 500, as small as 500 draws can tell


def test_the_difference_is_b_minus_a():
    a, b, refs = two_systems()
    forward = paired_bootstrap(accuracy, a, b, refs, samples=300)
    backward = paired_bootstrap(accuracy, b, a, refs, samples=300)
    assert forward.difference.score > 0 and forward.difference.low > 0  # b is the better one
    assert (backward.difference.low, backward.difference.high) == (
        -forward.difference.high, -forward.difference.low)
    assert np.array_equal(backward.differences, -forward.differences)
    assert backward.p_value == forward.p_value  # two-sided: the same either way round


def test_paired_percentile_is_the_procedure_paired_bootstrap_reports():
    a, b, refs = close_systems(n=80, seed=4)
    c = paired_bootstrap(accuracy, a, b, refs, samples=400, seed=7)
    differences, low, high, p = paired_percentile(
        accuracy, a, b, refs, resample_indices(len(refs), 400, seed=7))
    assert np.array_equal(differences, c.differences)
    assert (low, high, p) == (c.difference.low, c.difference.high, c.p_value)
    with pytest.raises(ValueError, match="read-only"):
        c.differences[0] = 1.0  # frozen like the rest of the comparison


def test_a_close_call_is_not_significant():
    rng = np.random.default_rng(5)
    refs = list(range(300))
    a = [r if rng.random() < 0.5 else -1 for r in refs]
    b = [r if rng.random() < 0.5 else -1 for r in refs]  # as good as a, different items
    result = paired_bootstrap(accuracy, a, b, refs, samples=500)
    assert result.difference.low < 0 < result.difference.high
    assert result.p_value > 0.05


def test_corpus_bleu_is_recomputed_on_each_draw():
    refs = ["the cat sat on the mat", "a dog ran fast", "the red mat", "a cat ran"] * 5
    hyps = ["the cat sat on a mat", "a dog ran", "red mat", "the cat ran"] * 5
    interval = bootstrap_interval(corpus_bleu, hyps, refs, samples=100)
    assert interval.score == pytest.approx(corpus_bleu(hyps, refs))
    assert interval.low < interval.score < interval.high


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="3 hypotheses for 2 references"):
        bootstrap_interval(accuracy, [1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_interval(accuracy, [1], [1], confidence=95)
    with pytest.raises(ValueError, match="hypotheses of b"):
        paired_bootstrap(accuracy, [1, 2], [1], [1, 2])
