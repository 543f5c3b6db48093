"""Files that a crash or a damaged disk cannot spoil: the one home of atomic writes and checksums.

Atomic writes: a file or folder is written under a temporary name, then renamed. A killed run
never leaves half a file under the real name, and readers see either the old version or the new.

Checksums: the sha256 of a file, read in pieces so that a file larger than memory can be checked;
and checksum lists that a saved artifact carries, so that a file damaged later (a flipped bit, a
truncated copy) is refused when it is loaded instead of giving wrong numbers. A checksum list is in
`sha256sum` format (`sha256sum -c` reads it): a folder's is `checksums.sha256` inside it, a single
file's is `<its name>.sha256` beside it.
"""

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

# ---------------------------------------------------------------- atomic writes


def temporary_sibling(path: Path) -> Path:
    """A new hidden name in the same folder (so a rename never crosses file systems)."""
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def remove_temporaries(folder: Path, name: str = "*") -> list[Path]:
    """Delete the temporaries that runs killed half-way left in `folder` (those of `name`, or all).

    Call it only where no other process can be writing right now: their temporaries look the same.
    """
    stale = sorted(Path(folder).glob(f".{name}.*.tmp"))
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale


def remove_folder(path: Path) -> None:
    """Delete a folder. It is renamed to a temporary name first, so a run killed half-way through
    the deletion leaves a temporary (for `remove_temporaries`), never a partial folder at `path`."""
    aside = temporary_sibling(path)
    os.replace(path, aside)
    shutil.rmtree(aside)


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it to `path` on success, delete it on error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path)
    try:
        yield tmp
        os.replace(tmp, path)  # atomic on POSIX
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """Yield a new, empty temporary folder beside `path` to fill; it takes the place of `path`
    on success (see replace_folder) and is deleted on error: never half a folder at `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path)
    tmp.mkdir()
    try:
        yield tmp
        replace_folder(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename


def write_atomically(path: str | Path, data: bytes) -> None:
    with atomic_file(path) as tmp:
        tmp.write_bytes(data)


def replace_folder(new: Path, target: Path) -> None:
    """Put the finished folder `new` in the place of `target` (which may exist).

    A folder cannot be renamed over a non-empty one, so the old one is first renamed aside:
    `target` is briefly missing, but it never holds a mix of old and new files.
    """
    aside = temporary_sibling(target)
    if target.exists():
        os.replace(target, aside)
    os.replace(new, target)
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def exclusive_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (another process waits here until it is
    released): one process builds a shared artifact while the others wait, then reuse it."""
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, even on a crash
        yield


# ---------------------------------------------------------------- checksums

CHUNK_BYTES = 1 << 20  # 1 MiB reads: as fast as larger ones, and memory stays flat
FOLDER_CHECKSUMS = "checksums.sha256"
# What from_pretrained and GPTQModel read from a model folder: each one there must be listed,
# so that a file added or renamed later is refused, never loaded unchecked.
LOADED_SUFFIXES = (".json", ".safetensors")


class DamagedFile(ValueError):
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
    recorded = read_checksums(checksums, artifact, remedy)
    verify_recorded(checksums, recorded, required, artifact, remedy)


def read_checksums(checksums: Path, artifact: str, remedy: str) -> dict[str, str]:
    """{file name: sha256} from a checksum list; DamagedFile if it is missing or damaged."""
    checksums = Path(checksums)
    try:
        text = checksums.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DamagedFile(artifact, checksums.name, "is missing (lost in a copy, or the file was "
                          "saved before llmlab recorded checksums)", remedy) from None
    except (OSError, UnicodeDecodeError) as error:
        raise DamagedFile(artifact, checksums.name, f"cannot be read ({error})", remedy) from None
    recorded = {}
    for number, line in enumerate(text.splitlines(), start=1):
        digest, _, name = line.partition("  ")
        if not re.fullmatch(r"[0-9a-f]{64}", digest) or not name:
            raise DamagedFile(artifact, checksums.name,
                              f"has a damaged line {number}: {line[:80]!r}", remedy)
        recorded[name] = digest
    return recorded


def verify_recorded(checksums: Path, recorded: dict[str, str], required: Iterable[str],
                    artifact: str, remedy: str) -> None:
    """Check the files `recorded` (read from the list `checksums`) names, each beside the list,
    against their sha256; the `required` files must be named. DamagedFile otherwise."""
    checksums = Path(checksums)
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
                              "(changed or damaged since)", remedy)


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
