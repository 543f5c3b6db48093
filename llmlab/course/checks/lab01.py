"""Checks for Lab 01 (data preprocessing, tokenization and token shards)."""

import json
import operator
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping
from itertools import pairwise

import numpy as np
from datasketch import MinHash, MinHashLSH
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from llmlab.course.checks import ExerciseFailed, call, call_or_fail, exercise, passed
from llmlab.data.clean import CONTROL_CHARACTERS, NEWLINES, normalize_text
from llmlab.data.dedup import (
    SHINGLE_WORDS,
    base_hashes,
    edited_copy,
    permutations,
    shingles,
)
from llmlab.data.packing import pack
from llmlab.data.shards import token_dtype

# ---------------------------------------------------------------- Exercise 1: normalize a text

NORMALIZE_CASES = [
    "cafe\u0301 au lait",  # "e" + combining acute accent
    "line one\r\nline two\rline three\n",
    "a tab\tstays, a bell\x07 goes, NUL\x00 and DEL\x7f too",
    "    indented code  \n\tstays indented\t\n",
    "the ligature in ﬁne stays, and so does ２",
    "spaces before an escape character \x1b\nare trailing too",
    # A control character between a letter and its accent: NFC composes them only once it is gone.
    "a bell between the letter and its accent: cafe\x07\u0301",
    "C1 controls go too: a next-line\x85 and a CSI\x9b from a terminal log\x80",
    # Text that `str.isprintable()` calls unprintable, yet is not a control character. The
    # trailing no-break space is whitespace, so stripping trailing whitespace removes that one.
    "no-break\u00a0space, soft\u00adhyphen, a family \U0001f468\u200d\U0001f469\u200d\U0001f467"
    " of one emoji\u00a0",
    "",
]
TEXT_NOT_CONTROLS = {"\u00a0": "no-break space", "\u00ad": "soft hyphen",
                     "\u200d": "zero-width joiner"}


def _nfc_before_controls(text: str) -> str:
    """The four rules with NFC run before the control characters go (a wrong order)."""
    text = CONTROL_CHARACTERS.sub("", unicodedata.normalize("NFC", NEWLINES.sub("\n", text)))
    return "\n".join(line.rstrip() for line in text.split("\n"))


def _normalize_hint(text: str, got: str, expected: str) -> str:
    if "\r" in got:
        return "Turn '\\r\\n' and a lone '\\r' (old Mac line end) into '\\n'."
    if got == normalize_text(text.replace("\r\n", "\n").replace("\r", "")):
        return "A lone '\\r' is an old Mac line end: make it '\\n' before dropping controls."
    lost = [name for char, name in TEXT_NOT_CONTROLS.items()
            if got.count(char) < expected.count(char)]
    if lost:
        return (f"Keep the {' and the '.join(lost)}: they are text (categories Zs and Cf), not "
                "control characters. str.isprintable() is False for them too: remove category "
                "Cc only.")
    if any("\x80" <= char <= "\x9f" for char in got):
        return ("U+0080 .. U+009F (C1 controls such as '\\x85') are control characters too: "
                "look at unicodedata.category, not at the ASCII range.")
    if CONTROL_CHARACTERS.search(got):
        return "Remove control characters (like '\\x07', '\\x00', '\\x1b') but keep '\\t', '\\n'."
    if got == normalize_text(text, "NFKC"):
        return "Use NFC: NFKC also rewrites compatibility characters ('ﬁ' -> 'fi', '２' -> '2')."
    if got == _nfc_before_controls(text):
        return ("Remove control characters before NFC: a control character between a letter and "
                "its accent keeps NFC from composing them, and removing it afterwards leaves the "
                "pair apart.")
    if "\u0301" in got:
        return "Compose characters: unicodedata.normalize('NFC', text) turns 'e\\u0301' into 'é'."
    pairs = zip(expected.split("\n"), got.split("\n"), strict=False)
    if any(e != g and e.lstrip() == g for e, g in pairs):
        return "Strip only trailing whitespace (rstrip): indentation means something in code."
    if got.count("\t") < expected.count("\t") or got.count("\n") < expected.count("\n"):
        return "Keep tabs and newlines: only the other control characters go."
    if got.split("\n") != [line.rstrip() for line in got.split("\n")]:
        return "Strip the trailing whitespace of every line, after removing control characters."
    return ""


@exercise(fallback=normalize_text, fallback_name="llmlab.data.clean.normalize_text")
def exercise_normalize(normalize) -> None:
    """Exercise 1: normalize(text) -> NFC, '\\n' line ends, no control characters except tab and
    newline, no trailing whitespace on any line."""
    name = "Exercise 1 (normalize text)"
    for text in NORMALIZE_CASES:
        got = call_or_fail(name, f"normalize({text!r})", normalize, text)
        expected = normalize_text(text)
        if got != expected:
            hint = _normalize_hint(text, got, expected) if isinstance(got, str) else (
                "Return the normalized text as a str.")
            raise ExerciseFailed(
                f"{name}: normalize({text!r}) returned {got!r}, expected {expected!r}. {hint}"
            )
    passed(name, "NFC, '\\n' line ends, no control characters (C0 or C1), text characters kept, "
                 "no trailing whitespace")


# ------------------------------------------------------- Exercise 2: MinHash signatures and LSH

_LSH = "Exercise 2 (MinHash and LSH)"


def minhash_lsh_reference(texts, a, b, bands, rows, size=SHINGLE_WORDS):
    """The lab's fallback for Exercise 2: datasketch's MinHash signatures of the texts' shingles,
    and the pairs that datasketch's MinHashLSH, with these bands and rows, makes candidates."""
    signatures = _signatures((shingles(text, size) for text in texts), a, b)
    return signatures, _lsh_pairs(signatures, bands, rows)


def _signatures(shingle_sets, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """datasketch's MinHash signature of each set of shingles, with the hash functions (a, b)."""
    rows = []
    for shingle_set in shingle_sets:
        signature = MinHash(num_perm=len(a), permutations=(a, b), scheme="affine32")
        signature.update_batch(list(shingle_set))
        rows.append(signature.hashvalues)
    return np.array(rows, dtype=np.uint32)


def _lsh_pairs(signatures: np.ndarray, bands: int, rows: int) -> set[tuple[int, int]]:
    index = MinHashLSH(num_perm=signatures.shape[1], params=(bands, rows))
    minhashes = [MinHash(num_perm=signatures.shape[1], hashvalues=values, scheme="affine32")
                 for values in signatures]
    for i, m in enumerate(minhashes):
        index.insert(i, m)
    return {(i, j) for j, m in enumerate(minhashes) for i in index.query(m) if i < j}


def _lsh_texts(rng: random.Random) -> list[str]:
    """Texts with every case the check needs: near-copies (a few words changed), an exact copy,
    a copy in other case and punctuation, a text shorter than a shingle, unrelated texts."""
    vocabulary = [f"w{i}" for i in range(40)]
    originals = [" ".join(rng.choice(vocabulary) for _ in range(rng.randrange(30, 60)))
                 for _ in range(5)]
    copies = [edited_copy(originals[0], 0.05, rng), edited_copy(originals[1], 0.1, rng),
              originals[2], originals[3].upper().replace(" ", ", ")]
    return [*originals, *copies, "w1 w2", "w3"]


def _signature_hint(got: np.ndarray, texts, a, b, size: int) -> str:
    def signatures_of(shingle_sets) -> np.ndarray:
        return _signatures(shingle_sets, a, b)

    if got.max() >= 2**32 or got.min() < 0:
        return ("some values are outside 0 .. 2^32 - 1: each hash function is a * h + b modulo "
                "2^32 (uint32 arithmetic wraps by itself; Python's int does not).")
    for other in sorted({1, 2, 3, size - 1, size + 1} - {size}):
        if other > 0 and np.array_equal(got, signatures_of(shingles(t, other) for t in texts)):
            return f"these are the signatures of shingles of {other} words, not {size}."
    if np.array_equal(got, signatures_of(
            frozenset(" ".join(w).encode() for w in _runs(re.findall(r"[^\W_]+", t), size))
            for t in texts)):
        return "the words were not lowercased: a copy in capitals must give the same shingles."
    if all(len(set(row.tolist())) == 1 for row in got if len(row)):
        return ("every value of a signature is the same: one hash function was used for all "
                f"{len(a)}. Function i is a[i] * h + b[i] modulo 2^32.")
    hashes = [base_hashes(shingles(t, size)) for t in texts]
    with np.errstate(over="ignore"):
        largest = np.array([(a[:, None] * h[None, :] + b[:, None]).max(axis=1) for h in hashes])
    if np.array_equal(got, largest):
        return "these are the largest hash values; MinHash keeps the smallest."
    return ("a signature holds, for each hash function i, the smallest value of "
            "a[i] * h + b[i] (modulo 2^32) over the text's shingles' base hashes h.")


def _runs(words: list[str], size: int) -> list[list[str]]:
    return [words[i:i + size] for i in range(max(1, len(words) - size + 1))]


def _pairs_of(exercise_name: str, got) -> set[tuple[int, int]]:
    try:
        pairs = {tuple(int(x) for x in pair) for pair in got}
    except (TypeError, ValueError):
        raise ExerciseFailed(f"{exercise_name}: the candidates must be pairs of text indices, "
                             f"got {got!r}") from None
    if any(len(pair) != 2 for pair in pairs):
        raise ExerciseFailed(f"{exercise_name}: each candidate is a pair (i, j) of two indices.")
    self_pairs = [pair for pair in pairs if pair[0] == pair[1]]
    if self_pairs:
        raise ExerciseFailed(f"{exercise_name}: {self_pairs[0]} pairs a text with itself: a text "
                             "is not its own duplicate.")
    return {tuple(sorted(pair)) for pair in pairs}


def _candidates_hint(got: set, signatures: np.ndarray, bands: int, rows: int) -> str:
    if bands != rows and got == _lsh_pairs(signatures, rows, bands):
        return f"bands and rows are swapped: {bands} bands of {rows} values each."
    any_value = {(i, j) for i in range(len(signatures)) for j in range(i + 1, len(signatures))
                 if (signatures[i, :bands * rows] == signatures[j, :bands * rows]).any()}
    if got == any_value:
        return ("a pair that agrees on one value is not a candidate: it must agree on every "
                "value of at least one band.")
    return ("two texts are candidates when, for at least one band, all of the band's values are "
            "equal.")


@exercise(fallback=minhash_lsh_reference, fallback_name="datasketch's MinHash and MinHashLSH")
def exercise_minhash_lsh(minhash_lsh) -> None:
    """Exercise 2: minhash_lsh(texts, a, b, bands, rows, size) -> (signatures, candidate pairs),
    equal to datasketch's MinHash and MinHashLSH."""
    rng = random.Random(7)
    for bands, rows, size, seed in ((8, 4, 5, 1), (4, 8, 3, 2), (16, 2, 4, 3)):
        texts = _lsh_texts(rng)
        a, b = permutations(bands * rows, seed)
        call_text = (f"minhash_lsh(texts, a, b, bands={bands}, rows={rows}, size={size}) with "
                     f"{len(texts)} texts")
        got = call_or_fail(_LSH, call_text, minhash_lsh, list(texts), a.copy(), b.copy(), bands,
                           rows, size)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ExerciseFailed(f"{_LSH}: {call_text} returned {type(got).__name__}; return "
                                 "(signatures, candidates).")
        expected, expected_pairs = minhash_lsh_reference(texts, a, b, bands, rows, size)
        try:
            signatures = np.asarray(got[0], dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise ExerciseFailed(f"{_LSH}: {call_text}: the signatures must be numbers, one row "
                                 "per text.") from None
        if signatures.shape != expected.shape:
            raise ExerciseFailed(f"{_LSH}: {call_text}: signatures of shape {signatures.shape}, "
                                 f"expected one row per text and one column per hash function "
                                 f"{expected.shape}.")
        if not np.array_equal(signatures, expected):
            hint = _signature_hint(signatures, texts, a, b, size)
            raise ExerciseFailed(f"{_LSH}: {call_text}: the signatures differ from datasketch's "
                                 f"MinHash. {hint}")
        pairs = _pairs_of(_LSH, got[1])
        if pairs != expected_pairs:
            hint = _candidates_hint(pairs, expected, bands, rows)
            raise ExerciseFailed(
                f"{_LSH}: {call_text}: candidates {sorted(pairs)}, datasketch's MinHashLSH gives "
                f"{sorted(expected_pairs)}. {hint}")
    passed(_LSH, "signatures equal to datasketch's MinHash, candidates equal to its MinHashLSH, "
                 "for 3 sizes of shingles and 3 shapes of bands")


# ----------------------------------------------------------------- Exercise 3: the BPE merges


def library_bpe_merges(text: str, num_merges: int) -> list[tuple[str, str]]:
    """The merges, in order, that the `tokenizers` library's BPE trainer learns from `text`:
    words split at whitespace, a vocabulary of the text's characters plus `num_merges` tokens."""
    alphabet = set("".join(text.split()))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # the words of str.split()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + num_merges, show_progress=False)
    tokenizer.train_from_iterator([text], trainer)
    return [tuple(merge) for merge in json.loads(tokenizer.to_str())["model"]["merges"]]


def _random_corpus(seed: int) -> str:
    """A few lines of made-up words from a small alphabet: many ties, repeated words, runs of
    spaces and newlines between them."""
    rng = random.Random(seed)
    alphabet = rng.sample("abcdeéXY.", k=rng.randint(3, 6))
    words = ["".join(rng.choices(alphabet, k=rng.randint(1, 6))) for _ in range(12)]
    lines = [" ".join(rng.choices(words, k=rng.randint(3, 10))) for _ in range(6)]
    return "\n".join(lines).replace(" ", "  ", 2) + " \n"


BPE_CASES = [
    ("low " * 5 + "lower " * 2 + "newest " * 6 + "widest " * 3, 10),
    ("aaaa aaa aa a", 6),  # only 3 merges are possible: stop when no pair is left
    *((_random_corpus(seed), 25) for seed in range(4)),
]


def _merge(words: dict[tuple, int], pair: tuple[str, str]) -> dict[tuple, int]:
    merged = {}
    for word, count in words.items():
        tokens, i = [], 0
        while i < len(word):
            if word[i : i + 2] == pair:
                tokens.append(pair[0] + pair[1])
                i += 2
            else:
                tokens.append(word[i])
                i += 1
        merged[tuple(tokens)] = merged.get(tuple(tokens), 0) + count
    return merged


def _pair_counts(text: str, merges: list[tuple[str, str]]) -> Counter:
    """How often each adjacent pair occurs after `merges` were applied to the words of `text`."""
    words = Counter(tuple(word) for word in text.split())
    for pair in merges:
        words = _merge(words, pair)
    counts = Counter()
    for word, count in words.items():
        for pair in pairwise(word):
            counts[pair] += count
    return counts


def _as_pairs(got) -> list[tuple[str, str]] | None:
    try:
        pairs = [tuple(pair) for pair in got]
    except TypeError:
        return None
    ok = all(len(p) == 2 and all(isinstance(t, str) for t in p) for p in pairs)
    return pairs if ok else None


def _bpe_hint(text: str, got: list, expected: list, k: int) -> str:
    """Why the learner's merge number k + 1 differs from the library's."""
    if k == len(got):
        return (f"You stopped after {k} merges; the library made {len(expected)}: stop only at "
                "num_merges, or when no word has two tokens left. (If your loop found no pair, "
                "look at how a merge rewrites a word: merge a pair only where both tokens stand "
                "side by side as whole tokens.)")
    if k == len(expected):
        return (f"The library stops after {k} merges: then every word is a single token and no "
                "pair is left to merge.")
    if any(char.isspace() for char in "".join(got[k])):
        return ("A merge holds whitespace: split the text into words at whitespace first "
                "(pre-tokenization), and count pairs inside words only.")
    counts = _pair_counts(text, expected[:k])
    mine, theirs = counts[got[k]], counts[expected[k]]
    if mine == theirs:
        return (f"{got[k]} and {expected[k]} both occur {mine} times: a tie. The library breaks "
                "ties by vocabulary order: single characters come first, in code-point order, "
                "then each merged token in the order it was made; the pair whose first token "
                "comes first wins, then the pair whose second token comes first.")
    return (f"At this point {expected[k]} occurs {theirs} times and {got[k]} {mine} times. Count "
            "every adjacent pair of every word, once per occurrence of the word; and merge a pair "
            "only where both tokens stand side by side as whole tokens.")


@exercise(
    fallback=library_bpe_merges,
    fallback_name="llmlab.course.checks.lab01.library_bpe_merges, the tokenizers library's merges",
)
def exercise_bpe_merges(bpe_merges) -> None:
    """Exercise 3: bpe_merges(text, num_merges) -> the merges BPE learns, in order, as the
    `tokenizers` library learns them (words split at whitespace, ties by vocabulary order)."""
    name = "Exercise 3 (BPE merges)"
    for text, num_merges in BPE_CASES:
        expected = library_bpe_merges(text, num_merges)
        call_text = f"bpe_merges({text!r}, {num_merges})"
        try:
            got = call(name, bpe_merges, text, num_merges)
        except ExerciseFailed:
            raise
        except Exception as error:  # the learner's own bug: say where, and what to look at
            stop = (f" Only {len(expected)} merges are possible here: stop when no pair is left."
                    if len(expected) < num_merges else "")
            raise ExerciseFailed(
                f"{name}: {call_text} raised {type(error).__name__}: {error}.{stop}"
            ) from error
        pairs = _as_pairs(got)
        if pairs is None:
            raise ExerciseFailed(
                f"{name}: {call_text} returned {got!r}: return a list of "
                "(left, right) pairs of strings, in the order of the merges."
            )
        if pairs == expected:
            continue
        k = next((i for i, (a, b) in enumerate(zip(pairs, expected, strict=False)) if a != b),
                 min(len(pairs), len(expected)))
        raise ExerciseFailed(
            f"{name}: {call_text}: your first {k} merges agree with the tokenizers library; "
            f"then you merged {pairs[k : k + 3]}..., the library {expected[k : k + 3]}... "
            f"{_bpe_hint(text, pairs, expected, k)}"
        )
    passed(name, "the same merges, in the same order, as the tokenizers library's BPE trainer")


# ----------------------------------------------------------- Exercise 4: pack documents


def _rows(blocks) -> list[list[int]]:
    """Blocks as lists of ints, whether they came as lists, a NumPy array or a tensor."""
    return [[int(token) for token in row] for row in blocks]


PACKED = ("input_ids", "position_ids", "labels")


def _packed_rows(name: str, call_text: str, got, block_size: int) -> dict[str, list[list[int]]]:
    """The learner's three arrays as lists of rows, or a failure that says what to return."""
    if not isinstance(got, Mapping) or any(key not in got for key in PACKED):
        raise ExerciseFailed(f"{name}: {call_text} returned a {type(got).__name__}: return a dict "
                             "with the keys 'input_ids', 'position_ids' and 'labels', each a list "
                             "of rows (or a 2-D array or tensor).")
    rows = {}
    for key in PACKED:
        try:
            rows[key] = _rows(got[key])
        except (TypeError, ValueError):
            raise ExerciseFailed(f"{name}: {call_text}[{key!r}] is {got[key]!r}: make it a list "
                                 "of rows of ints (or a 2-D array).") from None
        lengths = {len(row) for row in rows[key]} - {block_size}
        if lengths:
            raise ExerciseFailed(f"{name}: {call_text}[{key!r}] has a row of {min(lengths)} "
                                 f"entries: every row holds exactly block_size = {block_size}.")
    return rows


def _ids_hint(expected: int, got: int, eos_id: int) -> str:
    if expected == eos_id:
        return "Put eos_id after every document: the model must learn where documents end."
    if got == eos_id:
        return "Put eos_id after each document, not before it."
    return ""


def _positions_hint(index: int, block_size: int, starts: set[int]) -> str:
    if index in starts:
        return ("Restart the positions at 0 where a document begins: its tokens do not follow "
                "the previous document's.")
    if index % block_size == 0:
        return ("Restart the positions at 0 where a row begins, even in the middle of a "
                "document: attention does not reach the previous row, so nothing stands before "
                "this token.")
    return "A position counts the tokens before it in its document and its row."


def _labels_hint(index: int, got: int, ids: list[int], starts: set[int], eos_id: int) -> str:
    if index >= len(ids):
        return "Padding is not text: give it the label -100."
    if index in starts:
        return ("A document's first token gets -100: the only token before it is the previous "
                "document's eos_id, which says nothing about the new document.")
    if got == -100 and ids[index] == eos_id:
        return ("Keep eos_id's label: the model must learn to end a document. The -100 goes on "
                "the first token of the next document.")
    if index + 1 < len(ids) and got == ids[index + 1]:
        return ("Do not shift the labels: a transformers model shifts them itself, so the label "
                "at each position is the token at that position.")
    return ""


def _check_packed(name: str, call_text: str, rows: dict, documents, block_size, eos_id) -> None:
    expected = {key: value.tolist() for key, value in pack(documents, block_size, eos_id).items()}
    ids = [token for document in documents for token in (*document, eos_id)]
    starts, begin = set(), 0
    for document in documents:
        starts.add(begin)
        begin += len(document) + 1
    if any(len(rows[key]) != len(expected[key]) for key in PACKED):
        dropped = len(rows["input_ids"]) == len(ids) // block_size
        raise ExerciseFailed(
            f"{name}: {call_text} returned {[len(rows[key]) for key in PACKED]} rows of input_ids, "
            f"position_ids and labels; expected {len(expected['input_ids'])} of each, to hold "
            f"{len(ids)} tokens with the eos_ids. "
            + ("Keep the last, incomplete row: pad it to block_size, so no token is dropped."
               if dropped else "")
        )
    flat = {key: [value for row in rows[key] for value in row] for key in PACKED}
    want = {key: [value for row in expected[key] for value in row] for key in PACKED}
    checks = [  # (key, which positions must agree, hint)
        ("input_ids", range(len(ids)), lambda i: _ids_hint(want["input_ids"][i],
                                                            flat["input_ids"][i], eos_id)),
        ("position_ids", range(len(ids)), lambda i: _positions_hint(i, block_size, starts)),
        # A row's first label is never used (the model shifts it out): any value there is right.
        ("labels", [i for i in range(len(want["labels"])) if i % block_size],
         lambda i: _labels_hint(i, flat["labels"][i], ids, starts, eos_id)),
    ]
    for key, indices, hint in checks:
        wrong = next((i for i in indices if flat[key][i] != want[key][i]), None)
        if wrong is not None:
            row, column = divmod(wrong, block_size)
            raise ExerciseFailed(
                f"{name}: {call_text}: {key}[{row}] is {rows[key][row]}, expected "
                f"{expected[key][row]} (first difference at column {column}). "
                f"{hint(wrong)}".strip()
            )


def _random_pack_case(seed: int) -> tuple[list[list[int]], int, int]:
    rng = random.Random(seed)
    documents = [[rng.randrange(1, 50) for _ in range(rng.randint(0, 11))]
                 for _ in range(rng.randint(1, 5))]
    return documents, rng.randint(2, 7), rng.randrange(50, 60)


PACK_CASES = [
    ([[5, 6, 7], [8, 9], [10, 11, 12, 13]], 4, 0),  # rows end exactly with the last eos_id
    ([[1, 2, 3, 4, 5, 6, 7, 8, 9]], 4, 99),  # one document over three rows, the last padded
    ([[3] * 10, [4] * 2, [5]], 8, 1),
    ([[7], [], [8]], 2, 0),  # an empty document is an eos_id alone
    ([], 4, 0),  # nothing to pack: no rows
    *(_random_pack_case(seed) for seed in range(8)),
]


@exercise(fallback=pack, fallback_name="llmlab.data.packing.pack")
def exercise_pack(pack_documents) -> None:
    """Exercise 4: pack(documents, block_size, eos_id) -> {"input_ids", "position_ids",
    "labels"}: rows of block_size, positions and labels that stay inside each document."""
    name = "Exercise 4 (pack documents, keeping their boundaries)"
    for documents, block_size, eos_id in PACK_CASES:
        copies = [list(doc) for doc in documents]  # the learner's code may change its input
        call_text = f"pack({documents}, {block_size}, {eos_id})"
        got = call_or_fail(name, call_text, pack_documents, copies, block_size, eos_id)
        if copies != documents:
            raise ExerciseFailed(
                f"{name}: {call_text} changed its input: the documents are now {copies}. The "
                "caller still needs them (another epoch, another block size): build new lists."
            )
        rows = _packed_rows(name, call_text, got, block_size)
        _check_packed(name, call_text, rows, documents, block_size, eos_id)
    passed(name, "every token once, eos_id after each document, positions and labels that "
                 "never reach across a document or a row, the last row padded")


# --------------------------------------------------------------- Exercise 5: the token dtype

UNSIGNED = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)]


def smallest_token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned NumPy dtype that holds every id 0 .. vocab_size - 1."""
    return next(dtype for dtype in UNSIGNED if np.iinfo(dtype).max >= vocab_size - 1)


def _as_dtype(got) -> np.dtype | None:
    """np.uint16, np.dtype("uint16"), "uint16" and torch.uint16 all mean the same dtype."""
    if got is None:
        return None
    try:
        return np.dtype(str(got).removeprefix("torch.") if "torch" in str(got) else got)
    except TypeError:
        return None


def _dtype_hint(vocab_size: int, got: np.dtype | None, expected: np.dtype) -> str:
    if got is None:
        return "Return a NumPy dtype such as np.uint16 (or its name, 'uint16')."
    if got.kind not in "iu":
        return "Token ids are whole numbers: use an unsigned integer dtype."
    if got.kind == "i":
        return (f"{got.name} is signed: half its range is negative numbers, so it holds ids only "
                f"up to {np.iinfo(got).max:,}. Use an unsigned dtype.")
    if got.itemsize < expected.itemsize:
        return (
            f"{vocab_size:,} ids need id {vocab_size - 1:,}, which does not fit {got.name} "
            f"(max {np.iinfo(got).max:,}). Never let ids wrap around: use {expected.name}."
        )
    if vocab_size - 1 == np.iinfo(expected).max:
        return (f"Ids run from 0 to vocab_size - 1: {vocab_size:,} ids "
                f"(0 .. {vocab_size - 1:,}) still fit {expected.name}.")
    return (
        f"{got.name} works but takes {got.itemsize // expected.itemsize}x the disk and memory "
        f"of {expected.name}: choose the smallest unsigned dtype that holds vocab_size - 1."
    )


TOKEN_DTYPE_CASES = [8192, 50257, 256, 257, 65535, 65536, 65537, 151936, 2**32, 2**32 + 1, 255, 1]


@exercise(fallback=token_dtype, fallback_name="llmlab.data.shards.token_dtype")
def exercise_token_dtype(choose_dtype) -> None:
    """Exercise 5: token_dtype(vocab_size) -> the smallest unsigned NumPy dtype for every id."""
    name = "Exercise 5 (token dtype)"
    for vocab_size in TOKEN_DTYPE_CASES:
        got = _as_dtype(call_or_fail(name, f"token_dtype({vocab_size:,})", choose_dtype,
                                     vocab_size))
        expected = smallest_token_dtype(vocab_size)
        if got != expected:
            hint = _dtype_hint(vocab_size, got, expected)
            raise ExerciseFailed(
                f"{name}: token_dtype({vocab_size:,}) returned "
                f"{got.name if got is not None else got!r}, expected {expected.name}. {hint}"
            )
    passed(name, "uint8 up to 256 ids, uint16 up to 65,536 (GPT-2's 50,257), uint32 up to 2**32 "
                 "(Llama 3's 128,256), uint64 above")


# ------------------------------------------------- Exercise 6: shards for a rank and a worker


def reference_shards_for(num_shards: int, rank: int, world_size: int, worker: int,
                         num_workers: int, epoch: int) -> list[int]:
    """One correct split: shuffle the shards with the epoch as seed (the same order in every
    process), give every world_size-th of them to `rank`, then every num_workers-th of those to
    `worker`."""
    if not 0 <= rank < world_size or not 0 <= worker < num_workers:
        raise ValueError(f"rank {rank} of {world_size} or worker {worker} of {num_workers} "
                         "does not exist")
    if num_shards < world_size:
        raise ValueError(f"{num_shards} shards leave some of {world_size} ranks without data")
    order = random.Random(epoch).sample(range(num_shards), num_shards)
    return order[rank::world_size][worker::num_workers]


def _random_shard_cases(seed: int, count: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        world_size, num_workers = rng.randint(1, 8), rng.randint(1, 4)
        cases.append((rng.randint(world_size, 48), world_size, num_workers))
    return cases


# (num_shards, world_size, num_workers); 6 shards on 2 ranks x 2 workers catches a flat split.
SHARD_CASES = [(8, 2, 2), (6, 2, 2), (8, 2, 3), (10, 4, 1), (9, 2, 3), (3, 3, 4), (5, 1, 1),
               *_random_shard_cases(seed=0, count=30)]
SHARD_EPOCHS = (0, 1, 7)
# (num_shards, rank, world_size, worker, num_workers, what is wrong): each must be a ValueError.
BAD_SHARD_CALLS = [
    (8, 2, 2, 0, 1, "rank 2 does not exist in a world of 2 ranks (0 and 1)"),
    (8, -1, 2, 0, 1, "rank -1 does not exist"),
    (8, 0, 2, 2, 2, "worker 2 does not exist among 2 workers (0 and 1)"),
    (1, 0, 2, 0, 1, "1 shard cannot give 2 ranks data: one would have nothing to train on"),
]


def _shard_list(name: str, call_text: str, got, num_shards: int) -> list[int]:
    try:
        shards = [operator.index(shard) for shard in got]
    except TypeError:
        raise ExerciseFailed(f"{name}: {call_text} returned {got!r}: return a list of shard "
                             "indices (ints).") from None
    if any(not 0 <= shard < num_shards for shard in shards):
        raise ExerciseFailed(f"{name}: {call_text} returned {shards}: shard indices run from 0 "
                             f"to {num_shards - 1}.")
    return shards


def _split(name, shards_for, num_shards, world_size, num_workers, epoch, readers) -> dict:
    """{(rank, worker): its shards}, asking the readers in the order given."""
    split = {}
    for rank, worker in readers:
        args = (num_shards, rank, world_size, worker, num_workers, epoch)
        call_text = f"shards_for{args}"
        got = call_or_fail(name, call_text, shards_for, *args)
        split[rank, worker] = _shard_list(name, call_text, got, num_shards)
    return split


def _check_split(name: str, split: dict, num_shards: int, world_size: int, num_workers: int,
                 epoch: int):
    workers = f"{num_workers} worker{'s' if num_workers > 1 else ''}"
    setting = f"in epoch {epoch} with {num_shards} shards, {world_size} ranks and {workers} each"
    owners: dict[int, list] = {}
    for reader, shards in split.items():
        for shard in shards:
            owners.setdefault(shard, []).append(reader)
    shared = {shard: readers for shard, readers in owners.items() if len(readers) > 1}
    if shared:
        shard, readers = min(shared.items())
        raise ExerciseFailed(
            f"{name}: {setting}, shard {shard} is read by (rank, worker) {readers}: they would "
            "train on the same tokens twice. Give each (rank, worker) pair shards of its own; "
            "if you shuffle, every process must shuffle the same way."
        )
    missing = sorted(set(range(num_shards)) - owners.keys())
    if missing:
        raise ExerciseFailed(f"{name}: {setting}, nobody reads shards {missing}. When the shards "
                             "do not divide evenly, the remainder must go somewhere.")
    per_rank = [sum(len(split[rank, w]) for w in range(num_workers)) for rank in range(world_size)]
    if max(per_rank) - min(per_rank) > 1:
        raise ExerciseFailed(
            f"{name}: {setting}, the ranks get {per_rank} shards: a rank with more data has more "
            "steps, and waits forever for the others at its extra ones. Split across ranks "
            "first so their shares differ by at most one; then split each rank's share among "
            "its workers."
        )
    for rank in range(world_size):
        per_worker = [len(split[rank, w]) for w in range(num_workers)]
        if max(per_worker) - min(per_worker) > 1:
            raise ExerciseFailed(
                f"{name}: {setting}, the workers of rank {rank} get {per_worker} shards: the "
                "busiest worker sets the pace. Give them shares that differ by at most one."
            )


def _check_deterministic(name: str, first: dict, again: dict, setting: tuple) -> None:
    num_shards, world_size, num_workers, epoch = setting
    changed = next((reader for reader in first if first[reader] != again[reader]), None)
    if changed:
        rank, worker = changed
        raise ExerciseFailed(
            f"{name}: shards_for{(num_shards, rank, world_size, worker, num_workers, epoch)} "
            f"returned {first[changed]}, then {again[changed]}. Each process works out its own "
            "share without asking the others, so the same arguments must give the same list, "
            "every time and in every process: seed the shuffle with the epoch."
        )


def _check_new_order_each_epoch(name: str, shards_for) -> None:
    num_shards, world_size, num_workers = 48, 2, 2
    readers = [(rank, worker) for rank in range(world_size) for worker in range(num_workers)]
    epochs = [_split(name, shards_for, num_shards, world_size, num_workers, epoch, readers)
              for epoch in range(4)]
    if all(split == epochs[0] for split in epochs):
        raise ExerciseFailed(
            f"{name}: with {num_shards} shards, {world_size} ranks and {num_workers} workers, "
            "epochs 0 to 3 all give every worker the same shards in the same order. Shuffle the "
            "shard order once per epoch, with the epoch as the seed, so that each epoch reads "
            "the data in a new order (the job of DistributedSampler.set_epoch in PyTorch)."
        )


def _check_bad_input(name: str, shards_for) -> None:
    for num_shards, rank, world_size, worker, num_workers, problem in BAD_SHARD_CALLS:
        args = (num_shards, rank, world_size, worker, num_workers, 0)
        try:
            got = call(name, shards_for, *args)
        except ValueError:
            continue
        except Exception as error:  # any other error is reported, not raised
            got = f"{type(error).__name__}: {error}"
        raise ExerciseFailed(
            f"{name}: shards_for{args} gave {got!r}, but {problem}. Raise ValueError with a "
            "message that says so: a wrong launch setting should stop the run, not train on the "
            "wrong data."
        )


@exercise(fallback=reference_shards_for,
          fallback_name="llmlab.course.checks.lab01.reference_shards_for")
def exercise_shards_for(shards_for) -> None:
    """Exercise 6: shards_for(num_shards, rank, world_size, worker, num_workers, epoch) -> the
    shard indices one data-loader worker of one rank reads in one epoch.

    Any split is right if every shard is read exactly once, the ranks' shares differ by at most
    one, so do the shares of a rank's workers, the same arguments always give the same list, and
    the epoch changes the order.
    """
    name = "Exercise 6 (shards for a rank and a worker)"
    for num_shards, world_size, num_workers in SHARD_CASES:
        readers = [(rank, worker) for rank in range(world_size) for worker in range(num_workers)]
        for epoch in SHARD_EPOCHS:
            split = _split(name, shards_for, num_shards, world_size, num_workers, epoch, readers)
            again = _split(name, shards_for, num_shards, world_size, num_workers, epoch,
                           readers[::-1])
            _check_deterministic(name, split, again, (num_shards, world_size, num_workers, epoch))
            _check_split(name, split, num_shards, world_size, num_workers, epoch)
    _check_new_order_each_epoch(name, shards_for)
    _check_bad_input(name, shards_for)
    passed(
        name,
        f"{len(SHARD_CASES)} splits in {len(SHARD_EPOCHS)} epochs: every shard read once, shares "
        "within one shard across ranks and across each rank's workers, the same every time, a "
        "new order each epoch; bad ranks and workers refused",
    )


NOTEBOOK = "01_data.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "normalize": exercise_normalize,
    "minhash_lsh": exercise_minhash_lsh,
    "bpe_merges": exercise_bpe_merges,
    "pack": exercise_pack,
    "token_dtype": exercise_token_dtype,
    "shards_for": exercise_shards_for,
}
