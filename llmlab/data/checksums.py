"""The sha256 of a file, read in pieces so that a file larger than memory can be checked; and
checksum lists that a saved artifact carries, so that a file damaged later (a flipped bit, a
truncated copy) is refused when it is loaded instead of giving wrong numbers.

A checksum list is in `sha256sum` format (`sha256sum -c` reads it): a folder's is
`checksums.sha256` inside it, a single file's is `<its name>.sha256` beside it.
"""

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from llmlab.data.atomic import write_atomically
from llmlab.data.errors import DataError

CHUNK_BYTES = 1 << 20  # 1 MiB reads: as fast as larger ones, and memory stays flat
FOLDER_CHECKSUMS = "checksums.sha256"
# What from_pretrained and GPTQModel read from a model folder: each one there must be listed,
# so that a file added or renamed later is refused, never loaded unchecked.
LOADED_SUFFIXES = (".json", ".safetensors")


class DamagedFile(DataError):
    """A saved file is missing, unreadable, or not what was saved (its sha256 differs)."""

    def __init__(self, artifact: str, file: str, problem: str, remedy: str):
        self.artifact, self.file, self.problem = artifact, file, problem
        super().__init__(f"{artifact} is damaged: {file} {problem}. {remedy}")


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def checksums_beside(path: str | Path) -> Path:
    """Where a single file's checksum list goes: `model.safetensors.sha256` beside it."""
    path = Path(path)
    return path.with_name(f"{path.name}.sha256")


def write_checksums(checksums: Path, names: Iterable[str]) -> None:
    """Record the sha256 of each file (named relative to the list's folder), read back from disk:
    what a later load must find."""
    folder = Path(checksums).parent
    lines = [f"{file_sha256(folder / name)}  {name}\n" for name in names]
    write_atomically(checksums, "".join(lines).encode("utf-8"))


def verify_checksums(checksums: Path, artifact: str, remedy: str, required: Iterable[str]) -> None:
    """Check every file the list names against its recorded sha256; the `required` files must be
    named. Raises DamagedFile ("{artifact} is damaged: {file} {problem}. {remedy}") otherwise."""
    checksums = Path(checksums)
    try:
        text = checksums.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DamagedFile(artifact, checksums.name, "is missing (lost in a copy, or the file was "
                          "saved before llmlab recorded checksums)", remedy) from None  # fmt: skip
    except (OSError, UnicodeDecodeError) as error:
        raise DamagedFile(artifact, checksums.name, f"cannot be read ({error})", remedy) from None
    recorded = {}
    for number, line in enumerate(text.splitlines(), start=1):
        digest, _, name = line.partition("  ")
        if not re.fullmatch(r"[0-9a-f]{64}", digest) or not name:
            raise DamagedFile(artifact, checksums.name,
                              f"has a damaged line {number}: {line[:80]!r}", remedy)  # fmt: skip
        recorded[name] = digest
    for name in required:
        if name not in recorded:
            raise DamagedFile(artifact, checksums.name, f"records no checksum for {name}", remedy)
    for name, digest in recorded.items():
        try:
            found = file_sha256(checksums.parent / name)
        except FileNotFoundError:
            raise DamagedFile(artifact, name, "is missing", remedy) from None
        except OSError as error:
            raise DamagedFile(artifact, name, f"cannot be read ({error})", remedy) from None
        if found != digest:
            raise DamagedFile(artifact, name, "differs from the sha256 recorded when it was saved "
                              "(changed or damaged since)", remedy)  # fmt: skip


def write_folder_checksums(folder: Path) -> None:
    """Record every file of a (flat) model folder in its checksums.sha256."""
    folder = Path(folder)
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != FOLDER_CHECKSUMS)
    write_checksums(folder / FOLDER_CHECKSUMS, names)


def verify_folder(folder: Path, artifact: str, remedy: str) -> None:
    """verify_checksums for a folder written with write_folder_checksums."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DamagedFile(artifact, "the folder", "does not exist", remedy)
    loaded = sorted(p.name for p in folder.iterdir() if p.suffix in LOADED_SUFFIXES)
    verify_checksums(folder / FOLDER_CHECKSUMS, artifact, remedy, loaded)
