"""From a corpus to a tokenizer and train/validation token shards, timed stage by stage.

`prepare_default_dataset` is what later labs call: it builds the dataset once and reuses it while
it is intact, and is safe to call from several processes at once.
"""

import json
import platform
import shutil
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from transformers import PreTrainedTokenizerFast

from llmlab.data.clean import CleaningConfig, CleaningReport, clean_documents
from llmlab.data.corpus import FINEWEB_EDU_BYTES, HUB_DATASETS, corpus_version, load_corpus
from llmlab.data.documents import Document, total_bytes
from llmlab.data.errors import DataError
from llmlab.data.shards import open_shard, shard_count, token_dtype, write_split
from llmlab.data.tokenization import (
    encode_texts,
    load_tokenizer,
    save_tokenizer,
    tokenizer_fingerprint,
    train_bpe,
)
from llmlab.files import (
    exclusive_lock,
    remove_temporaries,
    replace_folder,
    temporary_sibling,
)
from llmlab.network import ONLINE_VARIABLE, online
from llmlab.units import MB
from llmlab.vocab_sizes import VOCAB_SIZES

ENCODE_BATCH = 64  # documents per encode call: bounds the memory of the encodings in flight


@dataclass(frozen=True)
class DatasetSpec:
    corpus: str  # a name in llmlab.data.corpus.CORPORA, or a folder of your own files
    vocab_size: int
    val_fraction: float = 0.05  # whole documents, so no document is in both splits
    readers: int = 8  # shard counts are multiples of it: 1, 2, 4 or 8 readers get equal shares
    max_tokens_per_shard: int = 2**24  # 32 MiB of uint16
    seed: int = 0
    cleaning: CleaningConfig = field(default_factory=CleaningConfig)


PROFILE_SPECS = {
    "smoke": DatasetSpec("builtin-smoke", vocab_size=VOCAB_SIZES["smoke"]),
    "full": DatasetSpec("builtin", vocab_size=VOCAB_SIZES["full"]),  # offline; see profile_spec
}
PROFILE_SPECS["consumer"] = PROFILE_SPECS["full"]  # consumer: full's data (see profile_spec)
FULL_ONLINE_CORPUS = "fineweb-edu"  # what `full` trains on with LLMLAB_ONLINE=1


@dataclass(frozen=True)
class DatasetPaths:
    """A built dataset: its tokenizer folder and shard files."""

    root: Path
    tokenizer: Path
    train: tuple[Path, ...]
    val: tuple[Path, ...]
    fingerprint: str
    vocab_size: int
    info: dict  # dataset.json: the spec, counts, stage timings, Python version

    def load_tokenizer(self) -> PreTrainedTokenizerFast:
        return load_tokenizer(self.tokenizer)


@dataclass
class PipelineReport:
    """Seconds per stage and the sizes that went through; MB/s are of the corpus's input bytes."""

    input_bytes: int
    seconds: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    cleaning: CleaningReport | None = None

    def stage_mb_per_s(self) -> dict[str, float]:
        return {stage: self.input_bytes / MB / s for stage, s in self.seconds.items()}

    def mb_per_s(self, stages: Sequence[str] = ("read", "clean", "tokenize", "write")) -> float:
        """Throughput of the whole pipeline; tokenizer training is left out (it happens once)."""
        return self.input_bytes / MB / sum(self.seconds[s] for s in stages)


@contextmanager
def _timed(report: PipelineReport, stage: str):
    start = time.perf_counter()
    yield
    report.seconds[stage] = report.seconds.get(stage, 0.0) + time.perf_counter() - start


def split_documents(
    documents: Sequence[Document], val_fraction: float, seed: int
) -> tuple[list[Document], list[Document]]:
    """Shuffle whole documents with `seed`, then keep the last `val_fraction` for validation.

    Shuffling also mixes the sources (code, prose) through the training shards.
    """
    order = np.random.default_rng(seed).permutation(len(documents))
    n_val = max(1, round(len(documents) * val_fraction))
    if n_val >= len(documents):
        raise DataError(f"{len(documents)} document(s) are too few for a validation split")
    shuffled = [documents[i] for i in order]
    return shuffled[:-n_val], shuffled[-n_val:]


def encode_documents(tokenizer: PreTrainedTokenizerFast, texts: Sequence[str]) -> np.ndarray:
    """One stream of ids: each document's tokens followed by the end-of-document id."""
    dtype = token_dtype(len(tokenizer))
    eos = np.array([tokenizer.eos_token_id], dtype=dtype)
    parts = []
    for start in range(0, len(texts), ENCODE_BATCH):
        for ids in encode_texts(tokenizer, texts[start : start + ENCODE_BATCH]):
            parts += [np.array(ids, dtype=dtype), eos]
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def build_dataset(
    spec: DatasetSpec,
    folder: str | Path,
    tokenizer: PreTrainedTokenizerFast | None = None,
) -> tuple[DatasetPaths, PipelineReport]:
    """Read, clean, split, train a tokenizer (unless given), tokenize and write shards to `folder`.

    Writes into `folder` directly; `prepare_dataset` is the safe, reusable version.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    report = PipelineReport(0)
    with _timed(report, "read"):
        version = corpus_version(spec.corpus)  # before reading: a change made meanwhile shows
        documents = load_corpus(spec.corpus)
        report.input_bytes = total_bytes(documents)
    with _timed(report, "clean"):
        cleaned, report.cleaning = clean_documents(documents, spec.cleaning)
        train_docs, val_docs = split_documents(cleaned, spec.val_fraction, spec.seed)
    if tokenizer is None:
        with _timed(report, "train tokenizer"):
            tokenizer = train_bpe((d.text for d in train_docs), spec.vocab_size)
    fingerprint, vocab_size = tokenizer_fingerprint(tokenizer), len(tokenizer)
    shards = {}
    for split, docs in (("train", train_docs), ("val", val_docs)):
        with _timed(report, "tokenize"):
            ids = encode_documents(tokenizer, [d.text for d in docs])
        with _timed(report, "write"):
            count = shard_count(len(ids), spec.readers, spec.max_tokens_per_shard)
            shards[split] = write_split(ids, folder, split, count, vocab_size=vocab_size,
                                        tokenizer=fingerprint)
        report.tokens[split] = len(ids)
    with _timed(report, "write"):
        save_tokenizer(tokenizer, folder / "tokenizer")
        info = {
            "spec": asdict(spec), "corpus_version": version, "tokenizer": fingerprint,
            "vocab_size": vocab_size,
            "train": [p.name for p in shards["train"]], "val": [p.name for p in shards["val"]],
            "tokens": report.tokens, "documents": {"train": len(train_docs),
                                                   "val": len(val_docs)},
            "cleaning": [asdict(step) for step in report.cleaning.steps],
            "input_bytes": report.input_bytes, "seconds": report.seconds,
            "python": platform.python_version(),
        }
        (folder / "dataset.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
    return _paths(folder, info), report


def _paths(root: Path, info: dict) -> DatasetPaths:
    return DatasetPaths(
        root, root / "tokenizer", tuple(root / n for n in info["train"]),
        tuple(root / n for n in info["val"]), info["tokenizer"], info["vocab_size"], info,
    )


def open_dataset(root: str | Path, spec: DatasetSpec | None = None) -> DatasetPaths:
    """A built dataset after checking it whole: its spec (if given), tokenizer and every shard.

    Raises DataError, saying what is wrong, when any part is missing or damaged.
    """
    root = Path(root)
    try:
        info = json.loads((root / "dataset.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DataError(f"{root} holds no readable dataset.json ({error})") from None
    if spec is not None and info["spec"] != json.loads(json.dumps(asdict(spec))):  # as stored
        raise DataError(f"{root} was built with other settings: {info['spec']}")
    if spec is not None and info.get("corpus_version") != corpus_version(spec.corpus):
        raise DataError(f"{root} was built before the files in {spec.corpus} last changed")
    paths = _paths(root, info)
    if tokenizer_fingerprint(paths.load_tokenizer()) != paths.fingerprint:
        raise DataError(f"{paths.tokenizer} is not the tokenizer the shards were made with")
    for shard in (*paths.train, *paths.val):
        open_shard(shard, tokenizer=paths.fingerprint)  # size, fingerprint and checksum
    return paths


def prepare_dataset(out_dir: str | Path, spec: DatasetSpec) -> DatasetPaths:
    """The dataset for `spec` under `out_dir`: reused when intact (and, for a folder of your own
    files, when none was added, removed or edited since), else built.

    Built in a temporary folder and renamed into place, so a killed run leaves no half-built
    dataset; a lock makes a second process wait and then reuse what the first one built.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"data-{Path(spec.corpus).name}-{spec.vocab_size}"
    root = out_dir / name
    with exclusive_lock(out_dir / f".{name}.lock"):
        try:
            return open_dataset(root, spec)
        except DataError:
            pass  # missing, damaged or made with other settings: rebuild it
        remove_temporaries(out_dir, name)  # left by a run that was killed mid-build
        tmp = temporary_sibling(root)
        try:
            build_dataset(spec, tmp)
            replace_folder(tmp, root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename
    return open_dataset(root, spec)


def profile_spec(profile_name: str) -> DatasetSpec:
    """What a profile trains on: PROFILE_SPECS, except that `full` (and `consumer`, which shares
    its data) with LLMLAB_ONLINE=1 streams a FineWeb-Edu sample instead of the built-in corpus
    (12 MB, which GPT-2 small soon overfits)."""
    if profile_name not in PROFILE_SPECS:
        raise ValueError(f"unknown profile {profile_name!r}: use one of {sorted(PROFILE_SPECS)}")
    spec = PROFILE_SPECS[profile_name]
    if spec == PROFILE_SPECS["full"] and online():
        spec = replace(spec, corpus=FULL_ONLINE_CORPUS)
    return spec


def full_corpus_line() -> str:
    """One line saying what the full profile trains on, and the switch that changes it."""
    repository, config, _ = HUB_DATASETS[FULL_ONLINE_CORPUS]
    sample = f"a {FINEWEB_EDU_BYTES / 1e6:,.0f} MB sample of FineWeb-Edu ({repository}, {config})"
    if online():
        return f"full profile data: {sample}, streamed from the Hub ({ONLINE_VARIABLE}=1)"
    return (f"full profile data: the built-in corpus, as the course is offline; set "
            f"{ONLINE_VARIABLE}=1 before starting Python to train on {sample} instead")


def prepare_default_dataset(
    out_dir: str | Path, profile_name: str, corpus: str | None = None
) -> DatasetPaths:
    """The course's tokenizer and shards for a profile ("smoke": 2048-token vocabulary on a
    subset of the built-in corpus; "full": 32768 on all of it, or on a FineWeb-Edu sample when
    online; see profile_spec), optionally on another corpus."""
    spec = profile_spec(profile_name)
    if corpus is not None:
        spec = DatasetSpec(corpus, spec.vocab_size)
    return prepare_dataset(out_dir, spec)
