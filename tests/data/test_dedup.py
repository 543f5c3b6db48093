"""Near-duplicate documents: word sets and shingles ignore case and punctuation; the permutations
and base hashes are datasketch's own (a signature built from them equals MinHash's); LSH and the
estimate find planted near-copies with high precision and recall; the first of each group is
kept. Mistakes caught: shingles of the wrong size, a copy with a share of words changed missed
at a threshold it should pass, a threshold outside (0, 1) accepted, later copies kept."""

import random

import numpy as np
import pytest

from llmlab.data.corpus import builtin_corpus
from llmlab.data.dedup import (
    base_hashes,
    candidate_probability,
    detection_quality,
    drop_near_duplicates,
    edited_copy,
    jaccard,
    minhash,
    near_duplicate_pairs,
    normalized_words,
    permutations,
    plant_near_duplicates,
    shingles,
)


def test_words_ignore_case_punctuation_separators_and_spacing():
    text = "Date: 2021-03-04\nWritten: March 4, 2021"
    assert normalized_words(text) == {"date", "2021", "03", "04", "written", "march", "4"}
    assert normalized_words("date 2021/03/04 -> written: march 4, 2021") == normalized_words(text)
    assert normalized_words("snake_case CAFÉ déjà-vu") == {"snake", "case", "café", "déjà", "vu"}
    assert normalized_words(" -- ") == frozenset()


def test_jaccard_is_shared_over_all_words():
    assert jaccard(frozenset("abc"), frozenset("bcd")) == 2 / 4
    assert jaccard(frozenset("ab"), frozenset("ab")) == 1.0
    assert jaccard(frozenset("ab"), frozenset("cd")) == 0.0
    assert jaccard(frozenset(), frozenset()) == 1.0


def test_shingles_are_runs_of_words_in_any_case_and_punctuation():
    assert shingles("A b, c-D e", size=3) == {b"a b c", b"b c d", b"c d e"}
    assert shingles("one two", size=5) == {b"one two"}  # shorter than a shingle: one shingle
    assert shingles("x", size=1) == {b"x"}
    assert len(shingles(" ".join(map(str, range(100))))) == 96


@pytest.mark.parametrize("num_perm,seed", [(16, 1), (128, 7)])
def test_a_signature_from_the_permutations_and_base_hashes_is_datasketchs(num_perm, seed):
    text = " ".join(random.Random(seed).choice("abcdefgh") * 3 for _ in range(60))
    a, b = permutations(num_perm, seed)
    hashes = base_hashes(shingles(text))
    with np.errstate(over="ignore"):
        signature = (a[:, None] * hashes[None, :] + b[:, None]).min(axis=1)
    assert np.array_equal(signature, minhash(shingles(text), num_perm, seed).hashvalues)
    assert (a % 2 == 1).all()  # odd: each is a permutation of the 2^32 values


def test_the_candidate_probability_is_the_banding_s_curve():
    assert candidate_probability(1.0, 16, 8) == 1.0
    assert candidate_probability(0.0, 16, 8) == 0.0
    assert candidate_probability(0.5, 1, 1) == 0.5
    assert candidate_probability(0.5, 2, 1) == 0.75  # either of two bands
    assert candidate_probability(0.5, 1, 2) == 0.25  # both rows of one band
    assert candidate_probability(0.8, 16, 8) > 0.9 > 0.1 > candidate_probability(0.4, 16, 8)


@pytest.fixture(scope="module")
def documents():
    """Help pages of the built-in corpus, of a few hundred words or more, without the corpus's
    own near-copies (two pages share two thirds of their shingles)."""
    pages = [d.text for d in builtin_corpus("smoke") if d.source == "pydoc"
             and len(d.text.split()) > 200]
    return [pages[i] for i in drop_near_duplicates(pages, threshold=0.3)]


def test_planted_near_copies_are_found_and_only_they(documents):
    texts, planted = plant_near_duplicates(documents, copies=30, shares=[0.02], seed=3)
    assert len(texts) == len(documents) + 30 and len(planted) == 30
    assert set(planted.values()) == {0.02}
    assert all(source < len(documents) <= copy for source, copy in planted)
    quality = detection_quality(texts, near_duplicate_pairs(texts, threshold=0.5), planted, 0.5)
    assert quality["planted above"] == 30  # 2% of the words changed: still above 0.5
    assert quality["precision"] == 1.0 and quality["recall"] >= 0.95, quality
    # Exact hashing finds none of them: every copy differs somewhere.
    assert not {texts[copy] for _, copy in planted} & set(documents)


def test_a_high_threshold_misses_copies_edited_more_than_it_allows(documents):
    texts, planted = plant_near_duplicates(documents, copies=30, shares=[0.05], seed=4)
    strict = detection_quality(texts, near_duplicate_pairs(texts, 0.9), planted, 0.9)
    loose = detection_quality(texts, near_duplicate_pairs(texts, 0.3), planted, 0.3)
    assert strict["planted above"] == 0 and loose["planted above"] == 30  # 5%: about 0.6
    assert loose["recall"] >= 0.95 and loose["precision"] == 1.0, loose


def test_a_threshold_near_1_finds_the_nearest_copies_only(documents):
    texts = [documents[0], documents[0] + " one more", edited_copy(documents[0], 0.05,
                                                                   random.Random(0))]
    assert near_duplicate_pairs(texts, threshold=0.99) == [(0, 1)]


def test_the_first_of_each_group_is_kept(documents):
    texts = [documents[0], documents[1], edited_copy(documents[0], 0.02, random.Random(0)),
             documents[0]]
    assert drop_near_duplicates(texts) == [0, 1]
    with pytest.raises(ValueError, match=r"threshold is a Jaccard similarity in \(0, 1\)"):
        near_duplicate_pairs(texts, threshold=1.0)


def test_an_edited_copy_changes_about_the_share_of_words_asked():
    text = " ".join(f"w{i}" for i in range(1000))
    copy = edited_copy(text, 0.1, random.Random(0))
    changed = sum(x != y for x, y in zip(text.split(), copy.split(), strict=True))
    assert 60 <= changed <= 100  # 100 draws, some on the same place or the same word


def test_detection_quality_judges_pairs_by_their_exact_similarity():
    texts = ["a b c d e f g h", "a b c d e f g x", "a b c d e f g h", "p q r s t u v w"]
    # 1-word shingles: texts 0 and 1 share 7 of 9 words, 0 and 2 all, 0 and 3 none.
    planted = {(0, 1), (0, 2)}
    quality = detection_quality(texts, {(2, 0), (0, 3)}, planted, threshold=0.7, size=1)
    assert quality == {"found": 2, "precision": 0.5, "planted above": 2, "recall": 0.5}
    assert detection_quality(texts, set(), planted, 0.9, size=1)["planted above"] == 1
