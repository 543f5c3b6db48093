"""Corpora: the built-in corpus, local files and the Hub through `datasets` (a local stand-in;
never the network)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.data_samples import StandInHub

from llmlab.data import corpus
from llmlab.data.errors import DataError
from llmlab.data.manifest import make_manifest


def test_builtin_corpus_is_sorted_filtered_and_deterministic():
    everything = corpus.builtin_corpus()
    code = [d for d in everything if d.source == "stdlib"]
    names = [d.name for d in code]
    assert names == sorted(names)
    assert "os.py" in names and "json/decoder.py" in names
    assert not any(part in corpus.SKIPPED_FOLDERS for n in names for part in n.split("/")[:-1])
    assert not any(n.startswith("_sysconfigdata") for n in names)
    assert all(d.text for d in everything)
    prose = [d for d in everything if d.source == "pydoc"]
    assert len(prose) > 50 and everything[-len(prose) :] == prose
    smoke = corpus.builtin_corpus("smoke")
    assert [d.name for d in smoke if d.source == "stdlib"] == names[:: corpus.SMOKE_EVERY]
    assert make_manifest(everything, "builtin") == make_manifest(corpus.builtin_corpus(), "builtin")


def test_local_text_jsonl_and_parquet_files_through_datasets(tmp_path):
    (tmp_path / "a.txt").write_text("first file\nwith two lines\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "a row"}) + "\n"
                                      + json.dumps({"text": "another row"}) + "\n")
    pq.write_table(pa.table({"text": ["from parquet"]}), tmp_path / "c.parquet")
    docs = corpus.load_corpus(tmp_path)
    texts = sorted(d.text for d in docs)
    assert texts == ["a row", "another row", "first file\nwith two lines\n", "from parquet"]


def test_local_files_errors_name_the_file(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match="empty.jsonl is empty"):
        corpus.local_documents([empty])
    binary = tmp_path / "image.txt"
    binary.write_bytes(b"\x00\x01\x02")
    with pytest.raises(DataError, match="image.txt looks binary"):
        corpus.local_documents([binary])
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"content": "x"}) + "\n")
    with pytest.raises(DataError, match="no 'text' column.*text_field="):
        corpus.local_documents([rows], cache_dir=tmp_path / "cache")
    with pytest.raises(DataError, match="unknown kind of file"):
        corpus.local_documents([tmp_path / "data.csv"])


def test_hub_datasets_need_the_online_switch(monkeypatch):
    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)
    with pytest.raises(DataError, match="set LLMLAB_ONLINE=1"):
        corpus.hub_documents("tinystories")
    with pytest.raises(DataError, match="set LLMLAB_ONLINE=1"):
        corpus.load_corpus("wikitext-2")


def test_hub_path_with_a_local_stand_in_and_the_hub_offline(tmp_path, monkeypatch):
    stories = tmp_path / "tinystories"
    stories.mkdir()
    pq.write_table(pa.table({"text": ["Once upon a time.", "", "The end."]}),
                   stories / "train.parquet")
    monkeypatch.setitem(corpus.HUB_DATASETS, "tinystories", (str(stories), None, "text"))
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    docs = corpus.hub_documents("tinystories", max_documents=5)
    assert [d.text for d in docs] == ["Once upon a time.", "The end."]  # empty rows dropped
    assert corpus.hub_documents("tinystories", max_documents=1)[0].name == "train:0"


def test_a_byte_budget_stops_the_hub_stream_there(monkeypatch):
    """FineWeb-Edu's sample is streamed up to a budget in bytes: the row that reaches it is kept
    and no row after it is read (so no more is downloaded). Fails if the budget is ignored (all 6
    rows read), checked only after the next row is pulled (5 read), or counted in characters
    ("é" is 2 bytes: 5 rows would be kept)."""
    import datasets

    rows = ["é" * 50, "", "é" * 50, "é" * 50, "é" * 50, "é" * 50]  # 100 bytes each; one blank
    hub = StandInHub(rows)
    monkeypatch.setattr(datasets, "load_dataset", hub)
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    docs = corpus.hub_documents("fineweb-edu", max_bytes=250)
    assert [len(d.text.encode()) for d in docs] == [100, 100, 100]  # 300 >= 250: stop
    assert hub.rows_read == 4  # the three kept and the blank one between them
    assert hub.calls == [("HuggingFaceFW/fineweb-edu", "sample-10BT", "train", True)]


def test_wikitext_lines_are_joined_into_articles():
    lines = [" = First = \n", "\n", " text one \n", " = = Section = = \n", " more \n",
             " = Second = \n", " text two \n"]
    articles = corpus.wikitext_articles(lines)
    assert len(articles) == 2
    assert articles[0].startswith(" = First = ") and "Section" in articles[0]
    assert articles[1] == " = Second = \n text two \n"


def test_unknown_corpus_is_an_error():
    with pytest.raises(DataError, match="unknown corpus 'nope'"):
        corpus.load_corpus("nope")


def test_blank_lines_missing_texts_and_json_arrays_are_read(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n\n{"text": null}\n{"id": 3}\n')
    (tmp_path / "b.json").write_text(json.dumps([{"text": "two"}, {"text": "three"}], indent=1))
    texts = [d.text for d in corpus.local_documents(sorted(tmp_path.iterdir()),
                                                    cache_dir=tmp_path / "cache")]
    assert sorted(texts) == ["one", "three", "two"]
