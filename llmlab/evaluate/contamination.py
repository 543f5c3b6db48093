"""Contamination: is a test example in the training data, exactly or nearly?

A score on test examples the model trained on measures memory, not skill. A verbatim copy is
easy to find; a copy that was reformatted on the way (other case, punctuation, separators or
spacing: "Date: 2021-03-04" and "date 2021/03/04") is not, so texts are compared by their sets
of words (`normalized_words`, from llmlab.data.dedup) with the Jaccard similarity,
|A & B| / |A | B|. Comparing every test text with every training text costs their product;
MinHash squeezes each word set into `num_perm` numbers whose agreement estimates the Jaccard
similarity, and MinHashLSH finds the pairs likely above a threshold without comparing all of them
(both from datasketch).
"""

from collections.abc import Iterable, Iterator, Sequence

from datasketch import MinHash, MinHashLSH

from llmlab.data.dedup import HIGHEST_LSH_THRESHOLD, normalized_words


def minhashes(texts: Iterable[str], num_perm: int = 128, seed: int = 0) -> Iterator[MinHash]:
    """Each text's MinHash over its `normalized_words`, one at a time. Two MinHashes of one seed
    estimate their sets' Jaccard similarity (`a.jaccard(b)`) with a standard error of about
    sqrt(J (1 - J) / num_perm)."""
    words = ([word.encode() for word in normalized_words(text)] for text in texts)
    # generator draws the seed's permutations once for all texts, not once per text.
    return MinHash.generator(words, num_perm=num_perm, seed=seed)


def exact_copies(train_texts: Iterable[str], test_texts: Sequence[str]) -> list[int]:
    """Indices of the test texts that occur verbatim, as a whole string, among the training texts
    (read once, not kept: they may be a stream)."""
    wanted = set(test_texts)
    found = {text for text in train_texts if text in wanted}
    return [index for index, text in enumerate(test_texts) if text in found]


def near_duplicates(
    train_texts: Iterable[str],
    test_texts: Sequence[str],
    threshold: float = 0.9,
    num_perm: int = 128,
    seed: int = 0,
) -> list[int]:
    """Indices of the test texts whose word set has an estimated Jaccard similarity of at least
    `threshold` with some training text's: copies up to case, punctuation, separators and spacing,
    and copies with a few words changed. An estimate: a pair near the threshold may fall on
    either side of it (more `num_perm`, less noise)."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold is a Jaccard similarity in (0, 1], got {threshold}")
    # The test texts go into the index and the training texts stream past it once: memory grows
    # with the test set only, and each training text is one lookup, so millions of them scale.
    tests = list(minhashes(test_texts, num_perm, seed))
    index = MinHashLSH(threshold=min(threshold, HIGHEST_LSH_THRESHOLD), num_perm=num_perm)
    for number, minhash in enumerate(tests):
        index.insert(number, minhash)
    found = set()
    for minhash in minhashes(train_texts, num_perm, seed):
        # LSH names the candidates (likely above the threshold); the estimate decides.
        found.update(number for number in index.query(minhash)
                     if tests[number].jaccard(minhash) >= threshold)
    return sorted(found)
