"""The paired bootstrap: the same seed gives the same intervals, a one-system interval is as wide
as theory says, pairing cancels the luck both systems share, and the p-value separates a real
difference from none. Mistakes it catches: drawing without replacement (no spread at all),
drawing a's and b's sentences independently (unpaired: a wide difference interval), a p-value
from unshifted differences (a real improvement looks like chance), and p = 0 without the +1."""

import math

import numpy as np
import pytest

from llmlab.evaluate.bootstrap import bootstrap_interval, paired_bootstrap, resample_indices
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


def test_same_seed_same_answer_other_seed_other_draws():
    a, b, refs = two_systems()
    assert paired_bootstrap(accuracy, a, b, refs, 200, seed=3) == paired_bootstrap(
        accuracy, a, b, refs, 200, seed=3
    )
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


def test_p_value_separates_a_real_difference_from_none():
    a, b, refs = two_systems()
    better = paired_bootstrap(accuracy, a, b, refs, samples=500)
    assert better.p_value == 1 / 501  # never 0: the observed set counts as one draw
    same = paired_bootstrap(accuracy, a, list(a), refs, samples=500)
    assert same.difference.score == same.difference.low == same.difference.high == 0
    assert same.p_value == 1.0
    # The mistake: unshifted differences are compared with the observed one; a real
    # improvement then looks like chance about half of the time.
    a_draws = np.array([accuracy([a[i] for i in j], [refs[i] for i in j])
                        for j in resample_indices(len(refs), 500, 0)])
    b_draws = np.array([accuracy([b[i] for i in j], [refs[i] for i in j])
                        for j in resample_indices(len(refs), 500, 0)])
    observed = better.difference.score
    unshifted_p = (np.sum(np.abs(b_draws - a_draws) >= observed) + 1) / 501
    assert unshifted_p > 0.3


def test_a_close_call_is_not_significant():
    rng = np.random.default_rng(5)
    refs = list(range(300))
    a = [r if rng.random() < 0.5 else -1 for r in refs]
    b = [r if rng.random() < 0.5 else -1 for r in refs]  # as good as a, different items
    result = paired_bootstrap(accuracy, a, b, refs, samples=500)
    assert result.difference.low < 0 < result.difference.high or result.p_value > 0.05


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
