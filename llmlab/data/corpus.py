"""Where text comes from: the built-in corpus, your own files, and (online only) the Hub.

The built-in corpus is on every machine with Python: the standard library's `.py` sources (code)
and the interactive help topics of `pydoc_data` (English prose). It is assembled in a fixed order
(sorted relative paths, then sorted topic names) so the same Python version always gives the same
corpus; `llmlab.data.manifest` records what went in.
"""

import hashlib
import itertools
import os
import re
import sysconfig
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from llmlab.data.documents import Document, read_document
from llmlab.data.errors import DataError, require_online
from llmlab.network import ONLINE_VARIABLE

# Folders of the standard library left out of the corpus, and why.
SKIPPED_FOLDERS = {
    "site-packages": "third-party packages installed into this Python, not the standard library",
    "test": "CPython's test suite: deliberately broken files and very repetitive test code",
    "tests": "package test suites (lib2to3, ...), for the same reason",
    "idle_test": "IDLE's test suite, for the same reason",
    "pydoc_data": "its topics.py holds the help texts, which we take as prose instead",
}
# Files that describe this build of Python rather than being part of the library: they differ
# from machine to machine (config-3.11-x86_64-linux-gnu/, _sysconfigdata__linux_x86_64-...py).
SKIPPED_PREFIXES = ("config-", "_sysconfigdata")
SMOKE_EVERY = 8  # the smoke subset: every 8th code file (about 1.5 MB) and all help topics
BUILTIN_RULE = (
    "standard-library .py files in sorted relative-path order, skipping the folders "
    f"{', '.join(sorted(SKIPPED_FOLDERS))}, names starting with {' or '.join(SKIPPED_PREFIXES)} "
    "and empty files; then the pydoc_data help topics in sorted order. The smoke subset takes "
    f"every {SMOKE_EVERY}th code file and all topics."
)

# Hub datasets: (repository, configuration, text column).
HUB_DATASETS = {
    "wikitext-2": ("Salesforce/wikitext", "wikitext-2-raw-v1", "text"),
    "tinystories": ("roneneldan/TinyStories", None, "text"),
    # Web pages that a classifier rated educational; its 10B-token sample is what nanoGPT's
    # GPT-2 reproduction (build-nanogpt) trains on, so published losses exist for it.
    "fineweb-edu": ("HuggingFaceFW/fineweb-edu", "sample-10BT", "text"),
}
# How much of FineWeb-Edu the full profile streams: 500 MB of text (roughly 100M tokens, a few
# minutes of GPT-2 small on one H100); the stream stops there, so only this much is downloaded.
FINEWEB_EDU_BYTES = 500_000_000
LOCAL_KINDS = {".txt": "text", ".md": "text", ".jsonl": "json", ".json": "json",
               ".parquet": "parquet"}


def stdlib_dir() -> Path:
    """The standard library of the running Python (for a virtualenv, its base Python's)."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_sources(root: Path | None = None) -> list[Path]:
    """The standard library's `.py` files that go into the corpus, sorted by relative path."""
    root = root or stdlib_dir()
    kept = []
    for folder, subfolders, files in os.walk(root):
        # Prune skipped folders in place so os.walk never descends into them (site-packages
        # can hold many times more files than the standard library itself).
        subfolders[:] = [
            name for name in subfolders
            if name not in SKIPPED_FOLDERS and not name.startswith(SKIPPED_PREFIXES)
        ]
        kept += [
            Path(folder, name) for name in files
            if name.endswith(".py") and not name.startswith(SKIPPED_PREFIXES)
        ]
    return sorted(kept, key=lambda p: p.relative_to(root).as_posix())


def help_topics() -> list[Document]:
    """The interactive help's topics (`help('FOR')`, ...): English prose about Python."""
    from pydoc_data.topics import topics

    return [Document("pydoc", name, topics[name]) for name in sorted(topics)]


def builtin_corpus(subset: str = "all") -> list[Document]:
    """Standard-library code then help-topic prose; `subset="smoke"` keeps every 8th code file."""
    if subset not in ("all", "smoke"):
        raise ValueError(f"unknown subset {subset!r}: use 'all' or 'smoke'")
    root = stdlib_dir()
    files = [p for p in stdlib_sources(root) if p.stat().st_size > 0]  # no empty __init__.py
    if subset == "smoke":
        files = files[::SMOKE_EVERY]
    code = [
        # errors="replace": one odd file in someone's Python must not stop the lab; the bad
        # bytes are counted and the cleaning step removes them.
        read_document(p, source="stdlib", name=p.relative_to(root).as_posix(), errors="replace")
        for p in files
    ]
    return code + help_topics()


def local_documents(
    paths: Sequence[str | Path], *, text_field: str = "text", cache_dir: str | Path | None = None
) -> list[Document]:
    """Your own files through `datasets`: .txt/.md (one document per file), JSON lines, Parquet.

    Files are checked first: empty, binary or invalid UTF-8 text files are errors naming the file;
    so is a bad row (not UTF-8, not JSON, a text that is not a string), naming the file and row.
    """
    import datasets  # (here, not at the top: pyarrow and datasets take a while to import)

    from llmlab.data.bad_rows import check_text_column

    by_kind: dict[str, list[str]] = {}
    for path in map(Path, paths):
        kind = LOCAL_KINDS.get(path.suffix.lower())
        if kind is None:
            raise DataError(f"{path}: unknown kind of file; use one of {sorted(LOCAL_KINDS)}")
        if kind == "text":
            read_document(path)  # raises a DataError that names the file
        elif path.stat().st_size == 0:
            raise DataError(f"{path} is empty: put rows in it or leave it out of the input.")
        else:
            check_text_column(kind, path, text_field)  # raises a DataError naming file and row
        by_kind.setdefault(kind, []).append(str(path))
    documents = []
    for kind, files in sorted(by_kind.items()):
        options = {"sample_by": "document"} if kind == "text" else {}  # default: one row per line
        try:
            rows = datasets.load_dataset(kind, data_files=files, split="train",
                                         cache_dir=cache_dir, **options)
        except Exception as error:  # datasets raises many types; name the files either way
            raise DataError(f"could not read {files} as {kind}: {error}") from error
        if text_field not in rows.column_names:
            raise DataError(
                f"{files} have no {text_field!r} column (columns: {rows.column_names}): "
                "pass text_field= with the column that holds the text."
            )
        documents += [Document("local", f"{kind}:{i}", text) for i, text in
                      enumerate(rows[text_field]) if text]
    return documents


def hub_documents(
    name: str, split: str = "train", max_documents: int | None = None,
    max_bytes: int | None = None,
) -> list[Document]:
    """A Hub dataset's texts (only with LLMLAB_ONLINE=1), streamed so only what is used comes:
    at most `max_documents` texts, and no more once they hold `max_bytes` of UTF-8."""
    if name not in HUB_DATASETS:
        raise DataError(f"unknown Hub dataset {name!r}: use one of {sorted(HUB_DATASETS)}")
    require_online(repr(name), instead="the built-in corpus ('builtin')")
    import datasets  # (after the refusal: offline, the slow import is not needed)

    repository, config, field = HUB_DATASETS[name]
    try:
        rows = datasets.load_dataset(repository, config, split=split, streaming=True)
        texts = (row[field] for row in rows)
        if name.startswith("wikitext"):
            texts = wikitext_articles(list(texts))  # small: about 36k lines of Wikipedia
        texts = (text for text in texts if text.strip())
        if max_bytes is not None:
            texts = up_to_bytes(texts, max_bytes)
        kept = list(itertools.islice(texts, max_documents))
    except Exception as error:  # reading streams, so the network errors surface here
        raise DataError(
            f"could not load {repository} ({config or 'default'}, {split}) from the Hub: {error}. "
            f"If you set {ONLINE_VARIABLE}=1 in a running session, restart it: the Hugging Face "
            "libraries read their offline switch when they are imported."
        ) from error
    return [Document(name, f"{split}:{i}", text) for i, text in enumerate(kept)]


def up_to_bytes(texts: Iterable[str], max_bytes: int) -> Iterator[str]:
    """Texts until they hold `max_bytes` of UTF-8 (the one that reaches it included); the stream
    is read no further, so only the blocks holding those texts are downloaded."""
    total = 0
    for text in texts:
        yield text
        total += len(text.encode("utf-8"))
        if total >= max_bytes:
            return


WIKITEXT_TITLE = re.compile(r"^ = [^=].* = \n?$")  # " = Title = " opens an article


def wikitext_articles(lines: Sequence[str]) -> list[str]:
    """Wikitext comes one line per row; join the lines of each article into one document."""
    articles: list[list[str]] = []
    for line in lines:
        if WIKITEXT_TITLE.match(line) or not articles:
            articles.append([])
        articles[-1].append(line)
    return ["".join(article) for article in articles]


# Named corpora for `load_corpus` (and `prepare_default_dataset`).
CORPORA: dict[str, Callable[[], list[Document]]] = {
    "builtin": lambda: builtin_corpus("all"),
    "builtin-smoke": lambda: builtin_corpus("smoke"),
    "wikitext-2": lambda: hub_documents("wikitext-2"),
    "tinystories": lambda: hub_documents("tinystories", max_documents=200_000),
    "fineweb-edu": lambda: hub_documents("fineweb-edu", max_bytes=FINEWEB_EDU_BYTES),
}


def load_corpus(corpus: str | Path) -> list[Document]:
    """A corpus by name (see CORPORA) or a folder of your own files (see `local_documents`)."""
    if str(corpus) in CORPORA:
        return CORPORA[str(corpus)]()
    folder = Path(corpus)
    if not folder.is_dir():
        raise DataError(f"unknown corpus {corpus!r}: use one of {sorted(CORPORA)} or a folder")
    files = corpus_files(folder)
    if not files:
        raise DataError(f"{folder} holds no {'/'.join(sorted(LOCAL_KINDS))} files")
    return local_documents(files)


def corpus_files(folder: Path) -> list[Path]:
    """The files of a folder corpus that `load_corpus` reads, sorted."""
    return sorted(p for p in Path(folder).rglob("*") if p.suffix.lower() in LOCAL_KINDS)


def corpus_version(corpus: str | Path) -> str | None:
    """A digest that changes when a folder corpus changes (None for a named corpus).

    It covers each file's relative path, size and modification time: a file added, removed or
    edited changes it, and nothing is read (hashing the contents would cost seconds per GB).
    """
    if str(corpus) in CORPORA or not Path(corpus).is_dir():
        return None
    digest = hashlib.sha256()
    for path in corpus_files(Path(corpus)):
        stat = path.stat()
        name = path.relative_to(corpus).as_posix()
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]
