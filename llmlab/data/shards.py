"""Token shards: token ids in a compact binary file with a header that says what they are.

Layout: a 1024-byte header (a magic line, then JSON padded with spaces), then the ids as
little-endian uint16 (vocabularies up to 65,536 ids) or uint32. The header records the dtype, the
vocabulary size, the tokenizer's fingerprint, the token count and a sha256 of the ids and of those
fields, so a reader can tell a truncated, corrupted, tampered or foreign shard from a good one.
"""

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from llmlab.data.errors import DataError
from llmlab.files import atomic_file

MAGIC = b"llmlab token shard\n"
HEADER_BYTES = 1024  # a multiple of 4, so the ids that follow stay aligned for uint32
FORMAT = 2  # 2: the sha256 covers the header's fields too (in 1 it covered the ids only)
ID_DTYPES = ("uint16", "uint32")


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds every id 0 .. vocab_size - 1."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if vocab_size <= 2**16:
        return np.dtype(np.uint16)  # 2 bytes a token: half of uint32 on disk and in page cache
    if vocab_size <= 2**32:
        return np.dtype(np.uint32)
    raise ValueError(f"a vocabulary of {vocab_size:,} ids does not fit 32 bits")


@dataclass(frozen=True)
class ShardHeader:
    dtype: str
    vocab_size: int
    tokenizer: str  # the tokenizer's fingerprint
    tokens: int
    sha256: str
    format: int = FORMAT

    @property
    def nbytes(self) -> int:
        return self.tokens * np.dtype(self.dtype).itemsize


def write_shard(
    path: str | Path,
    tokens: np.ndarray,
    *,
    vocab_size: int,
    tokenizer: str,
    dtype: np.dtype | str | None = None,
) -> ShardHeader:
    """Write `tokens` (ids of a tokenizer with fingerprint `tokenizer`) to `path`, atomically.

    `dtype` defaults to `token_dtype(vocab_size)`. An id that does not fit is an error: a plain
    `astype` would silently wrap it around to a different token.
    """
    path = Path(path)
    needed = token_dtype(vocab_size)
    dtype = needed if dtype is None else np.dtype(dtype)
    if dtype.kind != "u" or dtype.itemsize < needed.itemsize:
        raise DataError(
            f"{path}: a vocabulary of {vocab_size:,} ids needs {needed.name}; {dtype.name} holds "
            f"ids up to {np.iinfo(dtype).max:,}. Write it with dtype={needed.name!r} (or None)."
        )
    tokens = np.asarray(tokens)
    if tokens.size and tokens.dtype.kind not in "iu":
        raise DataError(
            f"{path}: token ids must be integers, got an array of {tokens.dtype} (writing them "
            "would silently truncate 3.7 to 3): pass the ids the tokenizer returned."
        )
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise DataError(
            f"{path}: token ids run from {tokens.min()} to {tokens.max()}, outside the vocabulary "
            f"of {vocab_size:,} ids: pass the vocab_size of the tokenizer that made them."
        )
    data = tokens.astype(dtype.newbyteorder("<"), copy=False).tobytes()
    header = ShardHeader(dtype.name, vocab_size, tokenizer, int(tokens.size), sha256="")
    header = replace(header, sha256=_checksum(header, data))
    with atomic_file(path) as tmp:
        tmp.write_bytes(_header_bytes(header) + data)
    return header


def _checksum(header: ShardHeader, ids) -> str:
    """The sha256 of the header's other fields and the ids: a changed vocab_size or token count
    fails it just as a flipped id does."""
    fields = {k: v for k, v in asdict(header).items() if k != "sha256"}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode("utf-8"))
    digest.update(ids)
    return digest.hexdigest()


def _header_bytes(header: ShardHeader) -> bytes:
    text = MAGIC + json.dumps(asdict(header)).encode("utf-8")
    return text.ljust(HEADER_BYTES, b" ")


def read_header(path: str | Path) -> ShardHeader:
    """The header of a shard, checked against the file's size (a truncated file is an error)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} does not exist: build the shards first (prepare_default_dataset).")
    with open(path, "rb") as file:
        raw = file.read(HEADER_BYTES)
    if not raw.startswith(MAGIC) or len(raw) < HEADER_BYTES:
        raise DataError(
            f"{path} is not an llmlab token shard (no {MAGIC!r} header): point the reader at "
            "shards written by write_shard, or rebuild them."
        )
    try:
        header = ShardHeader(**json.loads(raw[len(MAGIC) :].decode("utf-8")))
    except (ValueError, TypeError) as error:
        raise DataError(f"{path} has a damaged header ({error}): delete it and rebuild.") from None
    problem = _header_problem(header)
    if problem:
        raise DataError(f"{path} has a damaged or outdated header ({problem}): delete it and "
                        "rebuild the shards (prepare_default_dataset rebuilds them).")
    found = path.stat().st_size - HEADER_BYTES
    if found != header.nbytes:
        raise DataError(
            f"{path} holds {found:,} bytes of tokens but its header promises {header.nbytes:,} "
            f"({header.tokens:,} x {header.dtype}): the file is truncated or was overwritten "
            "(an interrupted copy?). Delete it and rebuild the shards."
        )
    return header


def _header_problem(header: ShardHeader) -> str | None:
    """What is wrong with a header's fields, checked before any of them is used."""
    if header.format != FORMAT:
        return f"format {header.format!r}; this llmlab reads format {FORMAT}"
    if header.dtype not in ID_DTYPES:
        return f"dtype {header.dtype!r} is not one of {ID_DTYPES}"
    for name in ("vocab_size", "tokens"):
        value = getattr(header, name)
        if type(value) is not int or value < 0:  # (bool is an int subclass: `type` rules it out)
            return f"{name} {value!r} is not a count"
    return None


def open_shard(
    path: str | Path, *, tokenizer: str | None = None, verify: bool = True
) -> tuple[ShardHeader, np.ndarray]:
    """The header and a read-only memory map of the ids (nothing is read until it is indexed).

    `tokenizer`: the fingerprint the shard must have been made with. `verify` checks the sha256
    (of the ids and the header's fields), which reads the whole file once.
    """
    path = Path(path)
    header = read_header(path)
    if tokenizer is not None and header.tokenizer != tokenizer:
        raise DataError(
            f"{path} was made with another tokenizer (fingerprint {header.tokenizer}; yours is "
            f"{tokenizer}): load the tokenizer saved beside the shards, or rebuild the shards "
            "with yours."
        )
    ids = memmap_ids(path, header)
    if verify and _checksum(header, ids) != header.sha256:
        raise DataError(
            f"{path} is corrupted: the sha256 of its tokens and header fields differs from the "
            "one in its header. Delete it and rebuild the shards."
        )
    return header, ids


def read_tokens(paths: Sequence[str | Path], *, tokenizer: str | None = None) -> np.ndarray:
    """Every id of these shards, in order, in one int64 array (embeddings take int64; shards
    store 16 or 32 bits): a held-out split or a calibration set read whole, each shard checked
    as open_shard checks it."""
    parts = [np.asarray(open_shard(path, tokenizer=tokenizer)[1]) for path in paths]
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)


def memmap_ids(path: Path, header: ShardHeader) -> np.ndarray:
    """The ids of a shard as a read-only memory map (an empty array for an empty shard)."""
    if header.tokens == 0:
        return np.empty(0, dtype=header.dtype)  # an empty file region cannot be mapped
    dtype = np.dtype(header.dtype).newbyteorder("<")  # as written, on any machine
    return np.memmap(path, dtype=dtype, mode="r", offset=HEADER_BYTES, shape=(header.tokens,))


def shard_count(num_tokens: int, readers: int, max_tokens_per_shard: int) -> int:
    """Enough shards that none exceeds `max_tokens_per_shard`, and a multiple of `readers`
    (ranks x data-loader workers), so that every reader gets the same number of shards."""
    if num_tokens < readers:
        raise DataError(f"{num_tokens} tokens are too few to split among {readers} readers")
    return readers * max(1, math.ceil(num_tokens / (max_tokens_per_shard * readers)))


def write_split(
    tokens: np.ndarray, folder: Path, split: str, num_shards: int, *, vocab_size: int,
    tokenizer: str,
) -> list[Path]:
    """Cut one split's token stream into `num_shards` nearly equal shards: split_000.bin, ..."""
    paths = []
    for index, part in enumerate(np.array_split(tokens, num_shards)):
        path = folder / f"{split}_{index:03d}.bin"
        write_shard(path, part, vocab_size=vocab_size, tokenizer=tokenizer)
        paths.append(path)
    return paths
