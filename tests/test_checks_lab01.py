"""Lab 01's checks reject likely mistakes, each with a message that points at the mistake.
(tests/test_checks.py proves they pass on the solution and fail on the stub.)"""

import unicodedata

import numpy as np
import pytest

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab01 as check


def _normalize(text, form="NFC", newlines=True, controls=True, strip=str.rstrip, first=False):
    """The solution, with one step changed or dropped."""
    if newlines:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if first:  # strip trailing whitespace before the control characters go
        text = "\n".join(strip(line) for line in text.split("\n"))
    if controls:
        text = "".join(c for c in text if c in "\t\n" or unicodedata.category(c) != "Cc")
    if form:
        text = unicodedata.normalize(form, text)
    return "\n".join(strip(line) for line in text.split("\n")) if not first else text


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda t: _normalize(t, form="NFKC"), "Use NFC"),
        (lambda t: _normalize(t, form=None), "Compose characters"),
        (lambda t: _normalize(t, newlines=False), "lone '\\\\r' is an old Mac line end"),
        (lambda t: _normalize(t, controls=False), "Remove control characters"),
        (lambda t: _normalize(t, strip=str.strip), "indentation means something"),
        (lambda t: _normalize(t, first=True), "after removing control characters"),
        (lambda t: _normalize(t).replace("\t", ""), "Keep tabs and newlines"),
        (lambda t: _normalize(t).encode(), "as a str"),
    ],
)
def test_normalize_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_normalize(wrong)


def _pack(documents, block_size, eos_id, eos_first=False, eos=True, keep_partial=False):
    stream = []
    for document in documents:
        stream += ([eos_id] if eos and eos_first else []) + list(document)
        stream += [eos_id] if eos and not eos_first else []
    end = len(stream) if keep_partial else len(stream) // block_size * block_size
    return [stream[i : i + block_size] for i in range(0, end, block_size)]


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda d, b, e: _pack(d, b, e, eos=False), "Append eos_id after every document"),
        (lambda d, b, e: _pack(d, b, e, eos_first=True), "after each document, not before"),
        (lambda d, b, e: _pack(d, b, e, keep_partial=True), "Drop the incomplete last block"),
        (lambda d, b, e: [row + [e] * (b - len(row)) for row in _pack(d, b, e, keep_partial=True)],
         "Do not pad the last block"),
    ],
)  # fmt: skip
def test_pack_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_pack(wrong)


def test_pack_accepts_arrays_too(capsys):
    check.exercise_pack(lambda d, b, e: np.array(_pack(d, b, e), dtype=np.int64).reshape(-1, b))
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda v: np.uint16 if v < 2**16 else np.uint32, "65,536 ids \\(0 .. 65,535\\) still fit"),
        (lambda v: np.int16 if v <= 2**16 else np.int32, "signed"),
        (lambda v: np.uint16, "does not fit uint16"),
        (lambda v: np.uint32, "2x the disk"),
        (lambda v: np.int64, "signed"),
        (lambda v: None, "Return a NumPy dtype"),
    ],
)
def test_token_dtype_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_token_dtype(wrong)


@pytest.mark.parametrize(
    "right",
    [lambda v: "uint16" if v <= 65536 else "uint32",
     lambda v: np.dtype("<u2") if v <= 65536 else np.dtype("<u4")],
)  # fmt: skip
def test_token_dtype_accepts_names_and_dtype_objects(right, capsys):
    check.exercise_token_dtype(right)
    assert "PASSED" in capsys.readouterr().out


def _contiguous(n, rank, world, remainder_to_last=False):
    size = n // world
    end = n if remainder_to_last and rank == world - 1 else (rank + 1) * size
    return list(range(rank * size, end))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda n, r, w: list(range(0, n, w)), "is read by ranks"),  # forgot the rank offset
        (lambda n, r, w: _contiguous(n, r, w), "no rank reads shards"),  # floor drops the rest
        (lambda n, r, w: _contiguous(n, r, w, remainder_to_last=True), "differ by at most one"),
        (lambda n, r, w: list(range(r, n + 1, w)), "indices run from 0"),
    ],
)
def test_shards_for_rank_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_shards_for_rank(wrong)


def test_shards_for_rank_accepts_contiguous_blocks(capsys):
    check.exercise_shards_for_rank(lambda n, r, w: list(np.array_split(np.arange(n), w)[r]))
    assert "PASSED" in capsys.readouterr().out
