"""A document (one text and where it came from), and reading one from a file with clear errors."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llmlab.data.errors import DataError

BINARY_SNIFF_BYTES = 8192  # text files never contain NUL bytes; binary files almost always do early


@dataclass(frozen=True)
class Document:
    source: str  # "stdlib", "pydoc", "local", or a hub dataset's name
    name: str  # unique within its source: a relative path, a topic, a row number
    text: str
    undecodable_bytes: int = 0  # bytes that were not valid UTF-8 (replaced by U+FFFD)


def undecodable_byte_count(data: bytes) -> int:
    """Bytes that are not valid UTF-8: what survives a lossy decode re-encodes to the valid rest."""
    return len(data) - len(data.decode("utf-8", errors="ignore").encode("utf-8"))


def read_document(
    path: str | Path, *, source: str = "local", name: str | None = None, errors: str = "strict"
) -> Document:
    """Read a UTF-8 text file. Empty or binary files are errors.

    `errors="strict"` makes invalid UTF-8 an error; "replace" turns each bad sequence into U+FFFD
    and counts the bad bytes (the cleaning step can then remove them).
    """
    path = Path(path)
    data = path.read_bytes()
    if not data:
        raise DataError(f"{path} is empty: put text in it or leave it out of the input.")
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise DataError(
            f"{path} looks binary (it contains NUL bytes), not text: leave it out of the input "
            "(only UTF-8 text, JSON lines or Parquet files can be read)."
        )
    try:
        text = data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as error:
        bad = data[error.start : error.start + 4]
        raise DataError(
            f"{path} is not valid UTF-8 (byte {error.start}: {bad!r}): convert it to UTF-8 "
            "(e.g. `iconv -f latin1 -t utf-8`), or read it with errors='replace' to keep going "
            "and let the cleaning step drop the undecodable bytes."
        ) from None
    bad_bytes = undecodable_byte_count(data) if errors != "strict" else 0
    return Document(source, name or path.name, text, bad_bytes)


def total_bytes(documents: Sequence[Document]) -> int:
    """UTF-8 size of the documents' texts."""
    return sum(len(doc.text.encode("utf-8")) for doc in documents)
