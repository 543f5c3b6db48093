"""Contamination: exact copies are whole strings found among the training texts; near duplicates
are texts whose word sets agree (estimated by MinHash, found by MinHashLSH), so a reformatted copy
is found and a different example of the same template is not. Mistakes caught: a substring taken
for a copy, case or punctuation kept in the words (a reformatted copy missed), words split on
spaces only, a threshold on the wrong side (different dates of one template flagged), an
unseeded or wrongly seeded MinHash (results that change between runs), an LSH candidate
reported without checking its estimate, a threshold outside (0, 1] accepted."""

import itertools
import math
import random

import pytest

from llmlab.data.dedup import jaccard, normalized_words
from llmlab.data.tasks import task_splits
from llmlab.evaluate import exact_copies, minhashes, near_duplicates


def reformatted(text: str) -> str:
    """The same example written differently: other case, separators, punctuation and spacing."""
    return ("  " + text.lower().replace("-", "/").replace(":", " ->").replace("\n", " ;  ")
            .replace(",", ""))


@pytest.fixture(scope="module")
def dates():
    """Date examples as text (prompt and target), from disjoint sets of dates."""
    splits = task_splits("dates", {"train": 1000, "test": 200})
    return {name: [item.prompt + item.target for item in items] for name, items in splits.items()}


def test_exact_copies_are_whole_strings_found_in_training(dates):
    train, test = dates["train"], dates["test"]
    planted = train + [test[3], test[7] + " and more", reformatted(test[9])]
    # A stream of training texts is read once; only the verbatim copy counts.
    assert exact_copies(iter(planted), test) == [3]
    assert exact_copies(train, test) == []


def test_reformatted_copies_are_near_duplicates_not_exact_copies(dates):
    train, test = dates["train"], dates["test"]
    copied = [5, 42, 150]
    planted = train + [reformatted(test[i]) for i in copied]
    assert normalized_words(reformatted(test[5])) == normalized_words(test[5])
    assert near_duplicates(iter(planted), test) == copied
    assert near_duplicates(planted, test, threshold=1.0) == copied
    assert exact_copies(planted, test) == []


def test_different_dates_of_one_template_are_not_near_duplicates(dates):
    train, test = dates["train"], dates["test"]
    words = [normalized_words(text) for text in train + test]
    closest = max(jaccard(a, b) for a, b in itertools.combinations(words, 2))
    # At most 4/5: "Date: 1945-11-11 = November 11, 1945" has 4 words (its day, month and written
    # day are one word, "11"), another day of November 1945 has those 4 but "11" once and one of
    # its own. That lies three MinHash standard errors (about 0.035 at 128 permutations) below
    # the threshold of 0.9.
    assert 0.7 < closest <= 0.8
    assert near_duplicates(train, test, threshold=0.9) == []
    # A threshold below what dates share flags many: the test above is not empty by accident.
    assert len(near_duplicates(train, test, threshold=0.6)) > len(test) / 4  # 62 of 200 at 0.7


def test_the_minhash_estimate_is_the_jaccard_similarity_within_its_noise():
    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(2000)]
    errors = []
    for _ in range(60):
        a = rng.sample(vocabulary, rng.randrange(5, 60))
        shared = rng.sample(a, rng.randrange(len(a) + 1))  # so that J spreads from 0 to near 1
        b = shared + rng.sample(vocabulary, rng.randrange(5, 60))
        first, second = minhashes([" ".join(a), " ".join(b)], num_perm=256, seed=1)
        exact = jaccard(frozenset(a), frozenset(b))
        errors.append(abs(first.jaccard(second) - exact))
        # Four standard errors of the estimate (plus one permutation's worth for J near 0 or 1).
        assert errors[-1] <= 4 * math.sqrt(exact * (1 - exact) / 256) + 1 / 256
    assert sum(errors) / len(errors) < 0.03


def test_the_same_seed_gives_the_same_result(dates):
    train, test = dates["train"], dates["test"]
    assert near_duplicates(train, test, 0.6, seed=3) == near_duplicates(train, test, 0.6, seed=3)
    one, other = (next(minhashes(test[:1], seed=seed)).digest() for seed in (3, 4))
    assert (one == next(minhashes(test[:1], seed=3)).digest()).all()
    assert (one != other).any()


@pytest.mark.parametrize("threshold", [0.0, -0.5, 1.01, math.nan])
def test_a_threshold_outside_0_to_1_is_refused(threshold):
    with pytest.raises(ValueError, match=r"threshold is a Jaccard similarity in \(0, 1\]"):
        near_duplicates(["a b"], ["a b"], threshold=threshold)
