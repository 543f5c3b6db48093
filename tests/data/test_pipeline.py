"""The pipeline: a full round trip from documents to shards and back, and prepare_dataset's
promises: reuse when intact, rebuild when damaged, nothing half-built, one build for two callers."""

import dataclasses
import multiprocessing
import time

import numpy as np
import pytest
from helpers.data_samples import StandInHub

from llmlab.data import DatasetSpec, pipeline, prepare_dataset, prepare_default_dataset
from llmlab.data.clean import clean_documents
from llmlab.data.corpus import CORPORA, help_topics
from llmlab.data.errors import DataError
from llmlab.data.shards import HEADER_BYTES, open_shard

SPEC = DatasetSpec("tiny", vocab_size=400, readers=2, max_tokens_per_shard=4000)


@pytest.fixture(autouse=True)
def tiny_corpus(monkeypatch):
    monkeypatch.setitem(CORPORA, "tiny", lambda: help_topics()[:30])


def test_profiles_use_vocabularies_that_fit_uint16():
    assert pipeline.PROFILE_SPECS["smoke"].vocab_size == 2048
    assert pipeline.PROFILE_SPECS["full"].vocab_size == 32768
    with pytest.raises(ValueError, match="unknown profile 'tiny'"):
        prepare_default_dataset("unused", "tiny")


def test_consumer_trains_on_the_full_profiles_data_online_and_offline(monkeypatch):
    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)
    assert pipeline.profile_spec("consumer") == pipeline.profile_spec("full")
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    assert pipeline.profile_spec("consumer") == pipeline.profile_spec("full")
    assert pipeline.profile_spec("consumer").corpus == "fineweb-edu"


def test_full_trains_on_fineweb_edu_online_and_on_the_builtin_corpus_offline(tmp_path, monkeypatch):
    """The one switch picks full's corpus, and the line says which; the two datasets never
    share a folder or a tokenizer fingerprint, so an offline build is never taken for an online
    one. Fails if the switch is ignored (no stream read, equal fingerprints), if offline touches
    the Hub, or if smoke follows the switch too."""
    import datasets

    monkeypatch.setitem(CORPORA, "builtin", lambda: help_topics()[:30])  # small stand-ins
    hub = StandInHub(doc.text for doc in help_topics()[30:60])
    monkeypatch.setattr(datasets, "load_dataset", hub)
    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)
    assert "the built-in corpus" in pipeline.full_corpus_line()
    assert "set LLMLAB_ONLINE=1" in pipeline.full_corpus_line()
    offline = prepare_default_dataset(tmp_path, "full")
    assert hub.calls == []
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    assert "FineWeb-Edu (HuggingFaceFW/fineweb-edu, sample-10BT), streamed" in (
        pipeline.full_corpus_line())
    online = prepare_default_dataset(tmp_path, "full")
    assert hub.calls == [("HuggingFaceFW/fineweb-edu", "sample-10BT", "train", True)]
    assert (offline.info["spec"]["corpus"], online.info["spec"]["corpus"]) == (
        "builtin", "fineweb-edu")
    assert online.root != offline.root and online.fingerprint != offline.fingerprint
    assert pipeline.profile_spec("smoke") == pipeline.PROFILE_SPECS["smoke"]


def test_build_round_trip_from_documents_to_shards_and_back(tmp_path):
    paths, report = pipeline.build_dataset(SPEC, tmp_path)
    assert len(paths.train) % SPEC.readers == 0 and len(paths.val) % SPEC.readers == 0
    tokenizer = paths.load_tokenizer()
    stream = np.concatenate([open_shard(p, tokenizer=paths.fingerprint)[1]
                             for p in paths.train])
    assert len(stream) == report.tokens["train"] == paths.info["tokens"]["train"]
    cuts = np.flatnonzero(stream == tokenizer.eos_token_id)
    assert cuts[-1] == len(stream) - 1  # every document ends with the end-of-document token
    decoded = {tokenizer.decode(doc[:-1]) for doc in np.split(stream, cuts + 1)[:-1]}
    cleaned, _ = clean_documents(help_topics()[:30], SPEC.cleaning)
    train, _ = pipeline.split_documents(cleaned, SPEC.val_fraction, SPEC.seed)
    assert decoded == {d.text for d in train}
    assert set(report.seconds) == {"read", "clean", "train tokenizer", "tokenize", "write"}
    assert report.mb_per_s() > 0 and report.input_bytes == paths.info["input_bytes"]
    # The manifest says what each cleaning step removed.
    assert paths.info["cleaning"] == [dataclasses.asdict(s) for s in report.cleaning.steps]
    assert paths.info["cleaning"][-1]["step"] == "exact duplicates (sha256)"


def test_split_is_by_whole_documents():
    docs = help_topics()[:40]
    train, val = pipeline.split_documents(docs, 0.1, seed=0)
    assert len(val) == 4 and not {d.name for d in train} & {d.name for d in val}
    assert pipeline.split_documents(docs, 0.1, seed=0) == (train, val)  # deterministic


def _mtimes(paths):
    return [p.stat().st_mtime_ns for p in (*paths.train, *paths.val)]


def test_prepare_reuses_an_intact_dataset_and_rebuilds_a_damaged_one(tmp_path):
    first = prepare_dataset(tmp_path, SPEC)
    again = prepare_dataset(tmp_path, SPEC)
    assert again.fingerprint == first.fingerprint and _mtimes(again) == _mtimes(first)
    shard = first.train[0]
    data = bytearray(shard.read_bytes())
    data[HEADER_BYTES] ^= 0xFF
    shard.write_bytes(bytes(data))
    rebuilt = prepare_dataset(tmp_path, SPEC)
    open_shard(rebuilt.train[0], tokenizer=rebuilt.fingerprint)  # intact again
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        "data-tiny-400"
    ]


def test_other_settings_rebuild(tmp_path):
    prepare_dataset(tmp_path, SPEC)
    other = DatasetSpec("tiny", vocab_size=400, readers=4, max_tokens_per_shard=4000)
    with pytest.raises(DataError, match="built with other settings"):
        pipeline.open_dataset(tmp_path / "data-tiny-400", other)
    assert len(prepare_dataset(tmp_path, other).train) % 4 == 0


def test_a_failed_build_leaves_nothing_half_built(tmp_path, monkeypatch):
    def fail(*args):
        raise RuntimeError("killed mid-build")

    monkeypatch.setattr(pipeline, "encode_documents", fail)
    with pytest.raises(RuntimeError, match="killed mid-build"):
        prepare_dataset(tmp_path, SPEC)
    assert [p.name for p in tmp_path.iterdir()] == [".data-tiny-400.lock"]


def test_the_next_build_removes_what_a_killed_one_left(tmp_path):
    stale = tmp_path / ".data-tiny-400.1234-abcd.tmp"  # a SIGKILL leaves no chance to clean up
    (stale / "tokenizer").mkdir(parents=True)
    prepare_dataset(tmp_path, SPEC)
    assert not stale.exists()


def _prepare_and_report(out_dir, queue):
    queue.put(prepare_dataset(out_dir, SPEC).fingerprint)


def test_two_processes_at_once_build_once(tmp_path, monkeypatch):
    log = tmp_path / "builds.log"
    real_build = pipeline.build_dataset

    def counted_build(*args, **kwargs):
        with open(log, "a") as file:
            file.write("build\n")
        time.sleep(0.5)  # slow enough that the second process arrives while the first builds
        return real_build(*args, **kwargs)

    monkeypatch.setattr(pipeline, "build_dataset", counted_build)
    context = multiprocessing.get_context("fork")  # children inherit the patched functions
    queue = context.Queue()
    workers = [context.Process(target=_prepare_and_report, args=(tmp_path / "out", queue))
               for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    fingerprints = {queue.get(timeout=5) for _ in workers}
    assert len(fingerprints) == 1
    assert log.read_text() == "build\n"


def test_a_folder_corpus_that_changed_is_rebuilt_not_reused(tmp_path):
    folder = tmp_path / "my_corpus"
    folder.mkdir()
    topics = help_topics()[:60]
    for doc in topics[:30]:
        (folder / f"{doc.name}.txt").write_text(doc.text)
    spec = DatasetSpec(str(folder), vocab_size=400, readers=2, max_tokens_per_shard=4000)
    first = prepare_dataset(tmp_path / "out", spec)
    assert prepare_dataset(tmp_path / "out", spec).info == first.info  # unchanged: reused
    for doc in topics[30:]:  # more files: the same settings, another corpus
        (folder / f"{doc.name}.txt").write_text(doc.text)
    grown = prepare_dataset(tmp_path / "out", spec)
    assert sum(grown.info["documents"].values()) > sum(first.info["documents"].values())
    edited = folder / f"{topics[0].name}.txt"
    edited.write_text(topics[0].text.swapcase())  # same size, new content and time
    rebuilt = prepare_dataset(tmp_path / "out", spec)
    assert rebuilt.info["corpus_version"] != grown.info["corpus_version"]
