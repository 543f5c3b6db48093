"""Lab 01's checks reject likely mistakes, each with a message that points at the mistake, and
accept every correct answer. (tests/course/checks/test_every_lab.py proves they pass on the
solution and say "not done yet" on the stub.)"""

import random
import re
import unicodedata
from collections import Counter

import numpy as np
import pytest
import torch

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab01 as check
from llmlab.data.dedup import base_hashes


def _is_control(char: str) -> bool:
    return unicodedata.category(char) == "Cc"


def _normalize(
    text, form="NFC", newlines=True, drop=_is_control, strip=str.rstrip, strip_first=False
):
    """The solution, with one step changed or dropped."""
    if newlines:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if strip_first:  # strip trailing whitespace before the control characters go
        text = "\n".join(strip(line) for line in text.split("\n"))
    if drop:
        text = "".join(c for c in text if c in "\t\n" or not drop(c))
    if form:
        text = unicodedata.normalize(form, text)
    return text if strip_first else "\n".join(strip(line) for line in text.split("\n"))


def _nfc_before_controls(text):
    """The four rules in the wrong order: NFC first, so a control character between a letter
    and its accent keeps them apart."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    return _normalize(text, form=None)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(lambda t: _normalize(t, form="NFKC"), "Use NFC", id="nfkc"),
        pytest.param(lambda t: _normalize(t, form=None), "Compose characters", id="no_nfc"),
        pytest.param(lambda t: _normalize(t, newlines=False), "lone '\\\\r' is an old Mac",
                     id="lone_cr_dropped"),
        pytest.param(lambda t: _normalize(t, drop=None), "Remove control characters",
                     id="controls_kept"),
        pytest.param(lambda t: _normalize(t, drop=lambda c: re.match(r"[\x00-\x1f\x7f]", c)),
                     "C1 controls", id="ascii_controls_only"),
        pytest.param(lambda t: _normalize(t, drop=lambda c: not c.isprintable()),
                     "Keep the no-break space and the soft hyphen and the zero-width joiner",
                     id="every_unprintable_dropped"),
        pytest.param(lambda t: _normalize(t, drop=lambda c: unicodedata.category(c)[0] == "C"),
                     "Keep the soft hyphen and the zero-width joiner", id="all_of_category_C"),
        pytest.param(lambda t: _normalize(t, strip=str.strip), "indentation means something",
                     id="leading_whitespace_stripped"),
        pytest.param(lambda t: _normalize(t, strip_first=True), "after removing control",
                     id="stripped_before_controls_go"),
        pytest.param(lambda t: _normalize(t).replace("\t", ""), "Keep tabs and newlines",
                     id="tabs_dropped"),
        pytest.param(lambda t: _normalize(t).encode(), "as a str", id="bytes_returned"),
        pytest.param(_nfc_before_controls, "Remove control characters before NFC",
                     id="nfc_before_controls_go"),
    ],
)
def test_normalize_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_normalize(wrong)


def _merge_word(tokens, pair):
    out, i = [], 0
    while i < len(tokens):
        if tuple(tokens[i : i + 2]) == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(tokens[i])
            i += 1
    return out


def _by_vocabulary(counts, order):
    return max(counts, key=lambda p: (counts[p], -order[p[0]], -order[p[1]]))


def _bpe(text, num_merges, split=str.split, weighted=True, pick=_by_vocabulary, stop=True,
         merge_word=_merge_word):
    """A learner's merge loop, right by default; each argument swaps in one mistake."""
    words = Counter(split(text))
    tokens = {word: list(word) for word in words}
    order = {t: i for i, t in enumerate(sorted({c for word in words for c in word}))}
    merges = []
    while len(merges) < num_merges:
        counts = Counter()
        for word, count in words.items():
            for pair in zip(tokens[word], tokens[word][1:], strict=False):
                counts[pair] += count if weighted else 1
        if not counts and stop:
            break
        best = pick(counts, order)
        merges.append(best)
        order.setdefault(best[0] + best[1], len(order))
        tokens = {word: merge_word(symbols, best) for word, symbols in tokens.items()}
    return merges


def _replace_in_joined_string(tokens, pair):
    """The classic bug: merge "a b" by str.replace on the space-joined tokens, which also hits
    the "a b" inside "xa b" (tokens "xa" and "b")."""
    return " ".join(tokens).replace(f"{pair[0]} {pair[1]}", pair[0] + pair[1]).split(" ")


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(lambda t, n: _bpe(t, n, split=lambda text: [text]), "holds whitespace",
                     id="no_pre_tokenization"),
        pytest.param(lambda t, n: _bpe(t, n, split=lambda text: text.split(" ")),
                     "holds whitespace", id="split_on_spaces_only"),
        pytest.param(lambda t, n: _bpe(t, n, pick=lambda c, o: max(c, key=c.get)), "a tie",
                     id="ties_by_first_seen"),
        pytest.param(lambda t, n: _bpe(t, n, pick=lambda c, o: min(c, key=lambda p: (-c[p], p))),
                     "a tie", id="ties_by_string_order"),
        pytest.param(lambda t, n: _bpe(t, n, weighted=False), "once per occurrence of the word",
                     id="distinct_words_counted_once"),
        pytest.param(lambda t, n: _bpe(t, n, merge_word=_replace_in_joined_string),
                     "side by side as whole tokens", id="str_replace_merge"),
        pytest.param(lambda t, n: _bpe(t, n, stop=False), "stop when no pair is left",
                     id="never_stops"),
        pytest.param(lambda t, n: _bpe(t, n)[:-1], "You stopped after", id="one_merge_short"),
        pytest.param(lambda t, n: [" ".join(p) for p in _bpe(t, n)], "pairs of strings",
                     id="strings_returned"),
    ],
)
def test_bpe_merges_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_bpe_merges(wrong)


def test_bpe_merges_accepts_a_correct_loop_returning_lists(capsys):
    check.exercise_bpe_merges(lambda t, n: [list(pair) for pair in _bpe(t, n)])
    assert "PASSED" in capsys.readouterr().out


def _pack(documents, block_size, eos_id, *, eos=True, eos_first=False, drop_last=False,
          row_positions=True, doc_positions=True, first_label=-100, eos_label=True, shift=False,
          pad_label=-100, as_type=list):
    """A learner's packing, right by default; each argument swaps in one mistake."""
    ids, positions, labels = [], [], []
    for document in documents:
        tokens = [eos_id, *document] if eos_first else [*document, eos_id] if eos else document
        for place, token in enumerate(tokens):
            position = place if doc_positions else len(ids)
            if row_positions:  # count from the row's start when the document began earlier
                position = min(position, len(ids) % block_size)
            ids.append(token)
            positions.append(position)
            label = token if place or first_label is None else first_label
            labels.append(-100 if token == eos_id and not eos_label and not eos_first else label)
    if shift:
        labels = [*ids[1:], -100]
    real = len(ids)
    keep = real // block_size * block_size if drop_last else -(-real // block_size) * block_size
    ids, positions = (v[:keep] + [eos_id] * (keep - len(v)) for v in (ids, positions))
    labels = labels[:keep] + [pad_label] * (keep - len(labels))
    return {key: as_type([v[i : i + block_size] for i in range(0, keep, block_size)])
            for key, v in [("input_ids", ids), ("position_ids", positions), ("labels", labels)]}


@pytest.mark.parametrize(
    "mistake, hint",
    [
        pytest.param(dict(eos=False), "Put eos_id after every document", id="no_eos"),
        pytest.param(dict(eos_first=True), "after each document, not before", id="eos_before"),
        pytest.param(dict(drop_last=True), "Keep the last, incomplete row", id="last_row_dropped"),
        pytest.param(dict(doc_positions=False, row_positions=False),
                     "where a document begins", id="positions_of_the_stream"),
        pytest.param(dict(doc_positions=False), "where a document begins",
                     id="positions_of_the_row_only"),
        pytest.param(dict(row_positions=False), "where a row begins",
                     id="positions_run_on_across_rows"),
        pytest.param(dict(first_label=None), "first token gets -100", id="first_token_learned"),
        pytest.param(dict(eos_label=False), "Keep eos_id's label", id="eos_not_learned"),
        pytest.param(dict(shift=True), "Do not shift the labels", id="labels_shifted"),
        pytest.param(dict(pad_label=0), "Padding is not text", id="padding_learned"),
    ],
)
def test_pack_rejects_likely_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_pack(lambda d, b, e: _pack(d, b, e, **mistake))


def _pack_in_place(documents, block_size, eos_id):
    """Right rows, but each document gets its eos_id appended in place."""
    for document in documents:
        document.append(eos_id)
    return _pack([document[:-1] for document in documents], block_size, eos_id)


def test_pack_must_leave_its_input_alone():
    with pytest.raises(ExerciseFailed, match="changed its input"):
        check.exercise_pack(_pack_in_place)


@pytest.mark.parametrize("as_type", [lambda rows: np.array(rows, dtype=np.int32).reshape(
    -1, len(rows[0]) if rows else 1), torch.tensor, list], ids=["numpy", "tensor", "lists"])
def test_pack_accepts_arrays_tensors_and_lists(as_type, capsys):
    check.exercise_pack(lambda d, b, e: _pack(d, b, e, as_type=as_type))
    assert "PASSED" in capsys.readouterr().out


def test_pack_accepts_any_label_on_a_rows_first_token(capsys):
    """The model shifts labels left, so the label at column 0 is never a target."""
    def first_column_ignored(d, b, e):
        packed = _pack(d, b, e)
        packed["labels"] = [[-7, *row[1:]] for row in packed["labels"]]
        return packed

    check.exercise_pack(first_column_ignored)
    assert "PASSED" in capsys.readouterr().out


def test_pack_refuses_what_is_not_three_arrays():
    with pytest.raises(ExerciseFailed, match="return a dict"):
        check.exercise_pack(lambda d, b, e: _pack(d, b, e)["input_ids"])


UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(lambda v: np.uint16 if v <= 2**16 else np.uint32,
                     "256 ids \\(0 .. 255\\) still fit uint8", id="uint16_at_least"),
        pytest.param(lambda v: next(t for t in UNSIGNED if np.iinfo(t).max >= v),
                     "still fit uint8", id="off_by_one_vocab_size_as_an_id"),
        pytest.param(lambda v: np.uint8 if v <= 256 else np.uint16 if v <= 2**16 else np.uint32,
                     "does not fit uint32", id="no_uint64"),
        pytest.param(lambda v: np.int16 if v <= 2**16 else np.int32, "signed", id="signed"),
        pytest.param(lambda v: np.uint16 if v > 256 else np.uint8, "does not fit uint16",
                     id="uint16_above_uint8"),
        pytest.param(lambda v: np.uint32, "2x the disk", id="always_uint32"),
        pytest.param(lambda v: None, "Return a NumPy dtype", id="none"),
    ],
)
def test_token_dtype_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_token_dtype(wrong)


@pytest.mark.parametrize(
    "right",
    [
        pytest.param(lambda v: next(t for t in UNSIGNED if np.iinfo(t).max >= v - 1).__name__,
                     id="names"),
        pytest.param(lambda v: np.dtype(f"<u{next(b for b in (1, 2, 4, 8) if v <= 256**b)}"),
                     id="dtype_objects"),
        pytest.param(lambda v: np.min_scalar_type(v - 1), id="numpy_min_scalar_type"),
    ],
)
def test_token_dtype_accepts_uint8_and_every_spelling(right, capsys):
    check.exercise_token_dtype(right)
    assert "PASSED" in capsys.readouterr().out


def _shuffled(n, epoch):
    return random.Random(epoch).sample(range(n), n)  # the same order in every process


def _strided(n, rank, world, worker, workers, epoch, shuffle=True):
    order = _shuffled(n, epoch) if shuffle else list(range(n))
    return order[rank::world][worker::workers]


def _contiguous(n, rank, world, worker, workers, epoch, remainder_to_last=False):
    order, size = _shuffled(n, epoch), n // world
    end = n if remainder_to_last and rank == world - 1 else (rank + 1) * size
    return order[rank * size : end][worker::workers]


def _remainder_to_last_worker(n, rank, world, worker, workers, epoch):
    mine = _strided(n, rank, world, 0, 1, epoch)
    size = len(mine) // workers
    return mine[worker * size :] if worker == workers - 1 else mine[worker * size :][:size]


def _validated(split):
    """`split`, after the argument checks of a correct answer."""

    def shards_for(n, rank, world, worker, workers, epoch):
        check.reference_shards_for(n, rank, world, worker, workers, epoch)  # raises on bad input
        return split(n, rank, world, worker, workers, epoch)

    return shards_for


def _llmlab_flat_readers(n, rank, world, worker, workers, epoch):
    """A flat stride over rank * workers + worker (what llmlab.data.loaders once did)."""
    return list(range(rank * workers + worker, n, world * workers))


def _each_rank_its_own_seed(n, rank, world, worker, workers, epoch):
    return random.Random(epoch * 100 + rank).sample(range(n), n)[rank::world][worker::workers]


def _unseeded_shuffle(n, rank, world, worker, workers, epoch):
    return random.sample(range(n), n)[rank::world][worker::workers]


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(_validated(_llmlab_flat_readers), "the ranks get \\[4, 2\\] shards",
                     id="flat_reader_stride_as_llmlab_loaders"),
        pytest.param(_validated(lambda n, r, w, k, ks, e: _strided(n, r, w, 0, 1, e)),
                     "is read by \\(rank, worker\\)", id="workers_not_split"),
        pytest.param(_validated(lambda n, r, w, k, ks, e: _strided(n, 0, w, k, ks, e)),
                     "is read by", id="rank_offset_forgotten"),
        pytest.param(_validated(_contiguous), "nobody reads shards", id="remainder_dropped"),
        pytest.param(_validated(lambda *a: _contiguous(*a, remainder_to_last=True)),
                     "differ by at most one", id="remainder_to_last_rank"),
        pytest.param(_validated(_remainder_to_last_worker), "the workers of rank",
                     id="remainder_to_last_worker"),
        pytest.param(_validated(_unseeded_shuffle), "seed the shuffle with the epoch",
                     id="unseeded_shuffle"),
        pytest.param(_validated(_each_rank_its_own_seed), "every process must shuffle the same",
                     id="each_rank_its_own_seed"),
        pytest.param(_validated(lambda *a: _strided(*a, shuffle=False)), "DistributedSampler",
                     id="same_order_every_epoch"),
        pytest.param(_strided, "Raise ValueError", id="bad_rank_accepted"),
        pytest.param(_validated(lambda *a: [s + 1 for s in _strided(*a)]), "indices run from 0",
                     id="one_based"),
    ],
)
def test_shards_for_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_shards_for(wrong)


def _torch_randperm_blocks(n, rank, world, worker, workers, epoch):
    """The way torch's DistributedSampler shuffles, then contiguous blocks per rank and worker."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch))
    return np.array_split(np.array_split(order.numpy(), world)[rank], workers)[worker]


@pytest.mark.parametrize(
    "right",
    [
        pytest.param(check.reference_shards_for, id="strided"),
        pytest.param(_validated(_torch_randperm_blocks), id="contiguous_blocks_of_torch_randperm"),
        pytest.param(_validated(lambda n, r, w, k, ks, e: [
            int(s) for s in np.random.default_rng(e).permutation(n)[r::w][k::ks]]),
            id="numpy_generator"),
    ],
)
def test_shards_for_accepts_any_balanced_deterministic_split(right, capsys):
    check.exercise_shards_for(right)
    assert "PASSED" in capsys.readouterr().out


# ---------------------------------------------------------------- Exercise 2: MinHash and LSH


def _minhash_lsh(texts, a, b, bands, rows, size=5, *, words=None, reduce="min", lower=True,
                 one_function=False, wrap=True, any_value=False, swap=False, self_pairs=False):
    """MinHash and LSH by hand, with one switch per likely mistake (none: a correct version)."""
    size = words or size
    signatures = []
    for text in texts:
        found = re.findall(r"[^\W_]+", text.lower() if lower else text)
        runs = [found[i:i + size] for i in range(max(1, len(found) - size + 1))]
        hashes = base_hashes({" ".join(run).encode() for run in runs})
        if one_function:
            a, b = np.full_like(a, a[0]), np.full_like(b, b[0])
        if wrap:
            values = a[:, None] * hashes[None, :] + b[:, None]  # uint32: modulo 2^32
        else:
            values = np.array([[int(x) * int(h) + int(y) for h in hashes]
                               for x, y in zip(a, b, strict=True)], dtype=object)
        signatures.append(values.max(axis=1) if reduce == "max" else values.min(axis=1))
    if swap:
        bands, rows = rows, bands
    buckets = {}
    for t, signature in enumerate(signatures):
        for band in range(bands):
            part = signature[band * rows:(band + 1) * rows]
            keys = [(band, int(v)) for v in part] if any_value else [(band, tuple(part))]
            for key in keys:
                buckets.setdefault(key, set()).add(t)
    pairs = {(i, j) for members in buckets.values() for i in members for j in members
             if i < j or (self_pairs and i == j)}
    return signatures, pairs


def test_minhash_lsh_accepts_the_loop_and_the_library(capsys):
    assert check.exercise_minhash_lsh(_minhash_lsh) is _minhash_lsh
    assert check.exercise_minhash_lsh(check.minhash_lsh_reference) is check.minhash_lsh_reference

    def listed(*args):  # lists instead of arrays and sets, pairs in either order
        signatures, pairs = _minhash_lsh(*args)
        return [row.tolist() for row in signatures], [(j, i) for i, j in pairs]

    check.exercise_minhash_lsh(listed)
    assert capsys.readouterr().out.count("PASSED") == 3


@pytest.mark.parametrize("mistake,hint", [
    ({"words": 1}, "shingles of 1 words, not 5"),
    ({"lower": False}, "not lowercased"),
    ({"one_function": True}, "one hash function was used"),
    ({"reduce": "max"}, "keeps the smallest"),
    ({"wrap": False}, "modulo 2\\^32"),
    ({"swap": True}, "bands and rows are swapped"),
    ({"any_value": True}, "agrees on one value is not a candidate"),
    ({"self_pairs": True}, "pairs a text with itself"),
])
def test_minhash_lsh_names_each_mistake(mistake, hint):
    def wrong(*args):
        return _minhash_lsh(*args, **mistake)

    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_minhash_lsh(wrong)
