"""Write files and folders under a temporary name, then rename: a killed run never leaves half a
file under the real name, and readers see either the old version or the new one."""

import contextlib
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path


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
