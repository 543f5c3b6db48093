"""Checks for Lab 01 (data preprocessing, tokenization and token shards)."""

import numpy as np

from llmlab.course.checks import ExerciseFailed, call, exercise, passed
from llmlab.data.clean import CONTROL_CHARACTERS, normalize_text
from llmlab.data.packing import pack
from llmlab.data.shards import token_dtype

NORMALIZE_CASES = [
    "cafe\u0301 au lait",  # "e" + combining acute accent
    "line one\r\nline two\rline three\n",
    "a tab\tstays, a bell\x07 goes, NUL\x00 and DEL\x7f too",
    "    indented code  \n\tstays indented\t\n",
    "the ligature in ﬁne stays, and so does ２",
    "spaces before an escape character \x1b\nare trailing too",
    "",
]


def _normalize_hint(text: str, got: str, expected: str) -> str:
    if "\r" in got:
        return "Turn '\\r\\n' and a lone '\\r' (old Mac line end) into '\\n'."
    if got == normalize_text(text.replace("\r\n", "\n").replace("\r", "")):
        return "A lone '\\r' is an old Mac line end: make it '\\n' before dropping controls."
    if CONTROL_CHARACTERS.search(got):
        return "Remove control characters (like '\\x07', '\\x00', '\\x1b') but keep '\\t', '\\n'."
    if got == normalize_text(text, "NFKC"):
        return "Use NFC: NFKC also rewrites compatibility characters ('ﬁ' -> 'fi', '２' -> '2')."
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


@exercise()
def exercise_normalize(normalize) -> None:
    """Exercise 1: normalize(text) -> NFC, '\\n' line ends, no control characters except tab and
    newline, no trailing whitespace on any line."""
    name = "Exercise 1 (normalize text)"
    for text in NORMALIZE_CASES:
        got = call(name, normalize, text)
        expected = normalize_text(text)
        if got != expected:
            hint = _normalize_hint(text, got, expected) if isinstance(got, str) else (
                "Return the normalized text as a str.")  # fmt: skip
            raise ExerciseFailed(
                f"{name}: normalize({text!r}) returned {got!r}, expected {expected!r}. {hint}"
            )
    passed(name, "NFC, '\\n' line ends, no control characters, no trailing whitespace")


def _rows(blocks) -> list[list[int]]:
    """Blocks as lists of ints, whether they came as lists, a NumPy array or a tensor."""
    return [[int(token) for token in row] for row in blocks]


def _full_blocks(stream: list[int], block_size: int) -> list[list[int]]:
    full = len(stream) // block_size * block_size
    return [stream[i : i + block_size] for i in range(0, full, block_size)]


def _pack_variants(documents, block_size, eos_id) -> list[tuple[list, str]]:
    """What likely mistakes return, each with its hint."""
    with_eos = [t for doc in documents for t in (*doc, eos_id)]
    partial = [with_eos[i : i + block_size] for i in range(0, len(with_eos), block_size)]
    padded = partial[:-1] + [partial[-1] + [eos_id] * (block_size - len(partial[-1]))]
    return [
        (_full_blocks([t for doc in documents for t in doc], block_size),
         "Append eos_id after every document: the model must learn where documents end."),
        (_full_blocks([t for doc in documents for t in (eos_id, *doc)], block_size),
         "Put eos_id after each document, not before it."),
        (partial, "Drop the incomplete last block: every block has exactly block_size tokens."),
        (padded, "Do not pad the last block, drop it: packing exists to avoid padding."),
    ]  # fmt: skip


PACK_CASES = [
    ([[5, 6, 7], [8, 9], [10, 11, 12, 13]], 4, 0),
    ([[1, 2, 3, 4, 5], [6, 7]], 3, 99),
    ([[3] * 10, [4] * 2, [5]], 8, 1),
    ([[7, 8]], 4, 0),  # one block's worth is not there: no blocks at all
]


@exercise()
def exercise_pack(pack_documents) -> None:
    """Exercise 2: pack(documents, block_size, eos_id) -> blocks of exactly block_size tokens."""
    name = "Exercise 2 (pack documents into blocks)"
    for documents, block_size, eos_id in PACK_CASES:
        expected = _rows(pack(documents, block_size, eos_id))
        copies = [list(doc) for doc in documents]  # the learner's code may change its input
        got = call(name, pack_documents, copies, block_size, eos_id)
        try:
            got_rows = _rows(got)
        except TypeError:
            got_rows = None
        if got_rows == expected:
            continue
        hint = next((h for rows, h in _pack_variants(documents, block_size, eos_id)
                     if rows == got_rows), "")  # fmt: skip
        raise ExerciseFailed(
            f"{name}: pack({documents}, {block_size}, {eos_id}) returned {got_rows or got!r}, "
            f"expected {expected}. {hint}".strip()
        )
    passed(name, "each document ends with eos_id; only full blocks are kept")


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
                f"up to {np.iinfo(got).max:,}. Use an unsigned dtype.")  # fmt: skip
    if got == np.uint8:
        return "uint8 holds only 256 ids."
    if vocab_size == 2**16 and got == np.uint32:
        return "Ids run from 0 to vocab_size - 1: 65,536 ids (0 .. 65,535) still fit uint16."
    if got.itemsize < expected.itemsize:
        return (
            f"{vocab_size:,} ids need id {vocab_size - 1:,}, which does not fit {got.name} "
            f"(max {np.iinfo(got).max:,}). Never let ids wrap around: use {expected.name}."
        )
    return (
        f"{got.name} works but takes {got.itemsize // expected.itemsize}x the disk and memory "
        f"of {expected.name}: choose the smallest unsigned dtype that holds vocab_size - 1."
    )


@exercise()
def exercise_token_dtype(choose_dtype) -> None:
    """Exercise 3: token_dtype(vocab_size) -> the smallest unsigned NumPy dtype for every id."""
    name = "Exercise 3 (token dtype)"
    for vocab_size in [256, 8192, 32768, 50257, 65535, 65536, 65537, 100277, 151936, 262144]:
        got = _as_dtype(call(name, choose_dtype, vocab_size))
        expected = token_dtype(vocab_size)
        if got != expected:
            hint = _dtype_hint(vocab_size, got, expected)
            raise ExerciseFailed(
                f"{name}: token_dtype({vocab_size}) returned "
                f"{got.name if got is not None else got!r}, expected {expected.name}. {hint}"
            )
    passed(name, "uint16 for vocabularies up to 65,536 ids (GPT-2's 50,257), uint32 above")


@exercise()
def exercise_shards_for_rank(shards_for_rank) -> None:
    """Exercise 4: shards_for_rank(num_shards, rank, world_size) -> the shard indices of one rank.

    Any split is right if every shard goes to exactly one rank and shares differ by at most one.
    """
    name = "Exercise 4 (shards for a rank)"
    for num_shards, world_size in [(8, 2), (8, 4), (16, 8), (10, 4), (7, 7), (5, 1), (9, 2)]:
        owners: dict[int, list[int]] = {}
        shares = []
        for rank in range(world_size):
            got = call(name, shards_for_rank, num_shards, rank, world_size)
            got = [int(s) for s in got]
            text = f"shards_for_rank({num_shards}, {rank}, {world_size}) returned {got}"
            if any(not 0 <= s < num_shards for s in got):
                raise ExerciseFailed(f"{name}: {text}: indices run from 0 to {num_shards - 1}.")
            for shard in got:
                owners.setdefault(shard, []).append(rank)
            shares.append(len(got))
        shared = {s: r for s, r in owners.items() if len(r) > 1}
        if shared:
            shard, ranks = min(shared.items())
            raise ExerciseFailed(
                f"{name}: with num_shards={num_shards}, world_size={world_size}, shard {shard} "
                f"is read by ranks {ranks}: those ranks would train on the same tokens. Give "
                "each rank its own shards (for example every world_size-th from index rank)."
            )
        missing = sorted(set(range(num_shards)) - owners.keys())
        if missing:
            raise ExerciseFailed(
                f"{name}: with num_shards={num_shards}, world_size={world_size}, no rank reads "
                f"shards {missing}. When num_shards is not a multiple of world_size, the "
                "remainder must go somewhere."
            )
        if max(shares) - min(shares) > 1:
            raise ExerciseFailed(
                f"{name}: with num_shards={num_shards}, world_size={world_size}, the ranks get "
                f"{shares} shards: a rank with more steps than the others waits for them forever "
                "at its extra steps. Spread the shards so shares differ by at most one."
            )
    passed(name, "every shard is read by exactly one rank, and shares differ by at most one")


NOTEBOOK = "01_data.ipynb"
# The function each exercise asks for -> its check (tests/test_checks.py runs them all).
EXERCISES = {
    "normalize": exercise_normalize,
    "pack": exercise_pack,
    "token_dtype": exercise_token_dtype,
    "shards_for_rank": exercise_shards_for_rank,
}
