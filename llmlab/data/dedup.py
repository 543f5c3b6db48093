"""Near-duplicate documents: the same file with a few lines changed, a page copied with another
header. Exact hashing (clean.py) finds only copies to the byte; near-copies need a similarity.

The similarity of two documents is the Jaccard similarity |A & B| / |A | B| of their sets of
*shingles*: every run of `size` consecutive words (`shingles`). A small edit changes only the
shingles that overlap it, so a near-copy keeps most of them. Comparing every pair of documents
costs n^2 set operations; two tricks (datasketch implements both) make it linear:

- **MinHash**: for each of `num_perm` random hash functions, a document keeps the smallest hash of
  its shingles. Two documents keep the same smallest value for one function with probability
  equal to their Jaccard similarity, so the share of agreeing positions estimates it.
- **LSH banding**: cut each signature into `bands` bands of `rows` values; documents that agree
  on a whole band become candidates. A pair of similarity s is a candidate with probability
  1 - (1 - s^rows)^bands (`candidate_probability`): an S-curve that is steep around
  (1 / bands)^(1 / rows), the threshold the bands and rows are chosen for.

Each candidate's estimated similarity then decides (`near_duplicate_pairs`), and
`drop_near_duplicates` keeps the first document of each group of near-copies.
"""

import random
import re
from collections.abc import Iterable, Sequence

import numpy as np
from datasketch import MinHash, MinHashLSH
from datasketch.hashfunc import sha1_hash32
from datasketch.minhash import _fmix

WORD = re.compile(r"[^\W_]+")  # a run of letters and digits: anything else separates words
SHINGLE_WORDS = 5  # words per shingle: long enough that two unrelated files share few
# MinHashLSH needs two bands or more, which its tuning does not give for thresholds near 1 (above
# 0.96 at 64 permutations, 0.98 at 128): above this one the index proposes the candidates of this
# one. That only adds candidates; each one's estimate is still held to the threshold asked for.
HIGHEST_LSH_THRESHOLD = 0.95


def normalized_words(text: str) -> frozenset[str]:
    """The set of a text's words, lowercased; anything that is not a letter or a digit separates
    them. Case, punctuation, separators and spacing leave it unchanged, so a reformatted copy
    has the same set."""
    return frozenset(WORD.findall(text.lower()))


def jaccard(a: frozenset, b: frozenset) -> float:
    """The exact Jaccard similarity |a & b| / |a | b|: 1 for the same set, 0 for disjoint sets."""
    union = a | b
    return len(a & b) / len(union) if union else 1.0  # two empty sets are the same set


def shingles(text: str, size: int = SHINGLE_WORDS) -> frozenset[bytes]:
    """Every run of `size` consecutive words of `text` (lowercased, split as `normalized_words`
    splits), joined by single spaces, as UTF-8 bytes; a text of fewer words is one shingle."""
    words = WORD.findall(text.lower())
    runs = [words[i:i + size] for i in range(max(1, len(words) - size + 1))]
    return frozenset(" ".join(run).encode() for run in runs)


def permutations(num_perm: int = 128, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's `MinHash(num_perm, seed)` hash functions, as two uint32 arrays (a, b): function
    i maps a shingle's base hash h to a[i] * h + b[i] modulo 2^32 (a is odd: a permutation)."""
    a, b = MinHash(num_perm=num_perm, seed=seed).permutations
    return a.astype(np.uint32), b.astype(np.uint32)


def base_hashes(shingle_set: Iterable[bytes]) -> np.ndarray:
    """Each shingle's 32-bit hash before the permutations, as datasketch computes it (SHA-1's
    first 4 bytes, then a bit mixer), a uint32 array."""
    raw = np.array([sha1_hash32(shingle) for shingle in shingle_set], dtype=np.uint32)
    return _fmix(raw, 32).astype(np.uint32)  # datasketch 2.0's mixer (pinned; tested)


def minhash(shingle_set: Iterable[bytes], num_perm: int = 128, seed: int = 1) -> MinHash:
    """datasketch's MinHash of a set of shingles."""
    signature = MinHash(num_perm=num_perm, seed=seed)
    signature.update_batch(list(shingle_set))
    return signature


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """The chance that two documents of this Jaccard similarity agree on at least one whole band."""
    return 1 - (1 - similarity ** rows) ** bands


def near_duplicate_pairs(texts: Sequence[str], threshold: float = 0.7, num_perm: int = 128,
                         size: int = SHINGLE_WORDS, seed: int = 1) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, of texts whose shingle sets have an estimated Jaccard similarity of at
    least `threshold`: LSH (bands and rows tuned by datasketch for the threshold) proposes, the
    MinHash estimate decides."""
    if not 0 < threshold < 1:
        raise ValueError(f"threshold is a Jaccard similarity in (0, 1), got {threshold}")
    signatures = [minhash(shingles(text, size), num_perm, seed) for text in texts]
    index = MinHashLSH(threshold=min(threshold, HIGHEST_LSH_THRESHOLD), num_perm=num_perm)
    pairs = set()
    for j, signature in enumerate(signatures):  # each text meets only those before it
        pairs.update((i, j) for i in index.query(signature)
                     if signatures[i].jaccard(signature) >= threshold)
        index.insert(j, signature)
    return sorted(pairs)


def drop_near_duplicates(texts: Sequence[str], threshold: float = 0.7,
                         num_perm: int = 128) -> list[int]:
    """Indices of the texts to keep: all but the later members of each group of near-copies."""
    later = {j for _, j in near_duplicate_pairs(texts, threshold, num_perm)}
    return [i for i in range(len(texts)) if i not in later]


def edited_copy(text: str, share: float, rng: random.Random) -> str:
    """`text` with about `share` of its words replaced by other words of it, in place: a
    near-copy as crawls are full of (a changed date, a renamed variable)."""
    words = text.split(" ")
    for _ in range(max(1, round(share * len(words)))):
        words[rng.randrange(len(words))] = rng.choice(words)
    return " ".join(words)


def plant_near_duplicates(texts: Sequence[str], copies: int, shares: Sequence[float],
                          seed: int = 0) -> tuple[list[str], dict[tuple[int, int], float]]:
    """`texts` followed by `copies` edited copies (`edited_copy`) of texts drawn at random for each
    share of words changed, and each planted pair (original, copy) by index with its share: the
    duplicates a method should find."""
    rng = random.Random(seed)
    out, planted = list(texts), {}
    for share in shares:
        for _ in range(copies):
            source = rng.randrange(len(texts))
            planted[source, len(out)] = share
            out.append(edited_copy(texts[source], share, rng))
    return out, planted


def detection_quality(texts: Sequence[str], found: Iterable[tuple[int, int]],
                      planted: Iterable[tuple[int, int]], threshold: float,
                      size: int = SHINGLE_WORDS) -> dict[str, float]:
    """How well `found` pairs match the truth at `threshold`, by exact Jaccard similarity of the
    shingle sets: precision, the share of the pairs found that truly reach the threshold; recall,
    the share of the planted pairs that truly reach it which were found. (A planted copy edited
    beyond the threshold is not a near-duplicate there, and is not counted.)"""
    sets: dict[int, frozenset[bytes]] = {}

    def exact(i: int, j: int) -> float:
        for k in (i, j):
            if k not in sets:
                sets[k] = shingles(texts[k], size)
        return jaccard(sets[i], sets[j])

    found = {tuple(sorted(pair)) for pair in found}
    true_found = [pair for pair in found if exact(*pair) >= threshold]
    should = [pair for pair in planted if exact(*pair) >= threshold]
    return {"found": len(found),
            "precision": len(true_found) / len(found) if found else 1.0,
            "planted above": len(should),
            "recall": sum(pair in found for pair in should) / len(should) if should else 1.0}
