"""Write files and folders under a temporary name, then rename: a killed run never leaves half a
file under the real name, and readers see either the old version or the new one."""

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path


def temporary_sibling(path: Path) -> Path:
    """A new hidden name in the same folder (so a rename never crosses file systems)."""
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


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
