"""A corpus manifest: which documents went in, in which order, their sizes and checksums.

The standard library differs between Python versions (even patch releases), so the manifest
records the version it was made with; `compare_with_manifest` says what differs on this machine.
"""

import hashlib
import json
import platform
from collections.abc import Sequence
from pathlib import Path

from llmlab.data.documents import Document
from llmlab.files import write_atomically


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_manifest(documents: Sequence[Document], corpus: str, rule: str = "") -> dict:
    entries = [
        {"source": d.source, "name": d.name, "bytes": len(d.text.encode("utf-8")),
         "sha256": _sha256(d.text)}
        for d in documents
    ]
    return {
        "corpus": corpus,
        "rule": rule,
        "python": platform.python_version(),
        "documents": len(entries),
        "bytes": sum(e["bytes"] for e in entries),
        # One checksum for the whole corpus, order included: equal only if every document is.
        "sha256": hashlib.sha256("".join(e["sha256"] for e in entries).encode()).hexdigest(),
        "files": entries,
    }


def write_manifest(path: str | Path, manifest: dict) -> None:
    """JSON with one document per line, so a diff of two manifests reads line by line."""
    head = {key: value for key, value in manifest.items() if key != "files"}
    lines = json.dumps(head, indent=1)[:-2] + ',\n "files": [\n'
    lines += ",\n".join("  " + json.dumps(entry) for entry in manifest["files"])
    write_atomically(path, (lines + "\n ]\n}\n").encode("utf-8"))


def read_manifest(path: str | Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def compare_with_manifest(documents: Sequence[Document], manifest: dict) -> list[str]:
    """Differences between `documents` and a recorded manifest, one line each (empty: equal)."""
    here = make_manifest(documents, manifest["corpus"])
    if here["sha256"] == manifest["sha256"]:
        return []
    recorded = {(e["source"], e["name"]): e["sha256"] for e in manifest["files"]}
    current = {(e["source"], e["name"]): e["sha256"] for e in here["files"]}
    lines = [f"recorded with Python {manifest['python']}, this is Python {here['python']}"]
    lines += [f"missing here: {s}/{n}" for s, n in sorted(recorded.keys() - current.keys())]
    lines += [f"only here: {s}/{n}" for s, n in sorted(current.keys() - recorded.keys())]
    lines += [
        f"changed: {s}/{n}" for s, n in sorted(recorded.keys() & current.keys())
        if recorded[s, n] != current[s, n]
    ]
    return lines if len(lines) > 1 else [*lines, "the same documents in another order"]
