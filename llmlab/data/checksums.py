"""The sha256 of a file, read in pieces so that a file larger than memory can be checked."""

import hashlib
from pathlib import Path

CHUNK_BYTES = 1 << 20  # 1 MiB reads: as fast as larger ones, and memory stays flat


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
