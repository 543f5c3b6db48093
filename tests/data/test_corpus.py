"""Corpora: reading files with clear errors, the built-in corpus, local files and the Hub through
`datasets` (a local stand-in; never the network), and the manifest."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llmlab.data import corpus
from llmlab.data.documents import Document, read_document, undecodable_byte_count
from llmlab.data.errors import DataError
from llmlab.data.manifest import compare_with_manifest, make_manifest, read_manifest, write_manifest


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "looks binary"),
        (b"caf\xe9 au lait", "not valid UTF-8 \\(byte 3"),
    ],
)
def test_bad_files_are_errors_that_name_the_file_and_say_what_to_do(tmp_path, content, message):
    path = tmp_path / "input.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as error:
        read_document(path)
    assert str(path) in str(error.value)


def test_invalid_utf8_can_be_replaced_and_the_bad_bytes_are_counted(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("café crème".encode("latin-1"))
    doc = read_document(path, errors="replace")
    assert doc.text == "caf\ufffd cr\ufffdme"
    assert doc.undecodable_bytes == 2
    assert undecodable_byte_count("ok é".encode()) == 0


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


def test_manifest_round_trip_and_differences(tmp_path):
    docs = [Document("stdlib", "a.py", "x = 1\n"), Document("pydoc", "if", "The if statement")]
    path = tmp_path / "manifest.json"
    write_manifest(path, make_manifest(docs, "test", "two documents"))
    manifest = read_manifest(path)
    assert manifest["documents"] == 2 and manifest["bytes"] == 6 + 16
    assert len(path.read_text().splitlines()) == 12  # one line per document
    assert compare_with_manifest(docs, manifest) == []
    changed = [Document("stdlib", "a.py", "x = 2\n"), Document("stdlib", "b.py", "y = 1\n")]
    diff = compare_with_manifest(changed, manifest)
    assert "changed: stdlib/a.py" in diff and "only here: stdlib/b.py" in diff
    assert "missing here: pydoc/if" in diff
    assert compare_with_manifest(docs[::-1], manifest)[-1] == "the same documents in another order"


def test_the_committed_manifest_describes_the_builtin_corpus():
    manifest = read_manifest(corpus.Path(__file__).parents[2] / "data" / "corpus_manifest.json")
    assert manifest["corpus"] == "builtin" and manifest["rule"] == corpus.BUILTIN_RULE
    assert manifest["documents"] == len(manifest["files"]) > 500


def test_local_text_jsonl_and_parquet_files_through_datasets(tmp_path):
    (tmp_path / "a.txt").write_text("first file\nwith two lines\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "a row"}) + "\n"
                                      + json.dumps({"text": "another row"}) + "\n")  # fmt: skip
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
                   stories / "train.parquet")  # fmt: skip
    monkeypatch.setitem(corpus.HUB_DATASETS, "tinystories", (str(stories), None, "text"))
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    docs = corpus.hub_documents("tinystories", max_documents=5)
    assert [d.text for d in docs] == ["Once upon a time.", "The end."]  # empty rows dropped
    assert corpus.hub_documents("tinystories", max_documents=1)[0].name == "train:0"


def test_wikitext_lines_are_joined_into_articles():
    lines = [" = First = \n", "\n", " text one \n", " = = Section = = \n", " more \n",
             " = Second = \n", " text two \n"]  # fmt: skip
    articles = corpus.wikitext_articles(lines)
    assert len(articles) == 2
    assert articles[0].startswith(" = First = ") and "Section" in articles[0]
    assert articles[1] == " = Second = \n text two \n"


def test_unknown_corpus_is_an_error():
    with pytest.raises(DataError, match="unknown corpus 'nope'"):
        corpus.load_corpus("nope")


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("b.jsonl", b'{"text": "fine"}\n{"text": 5}\n', "b.jsonl, line 2: 'text' is int 5, not a"),
        ("b.jsonl", b'{"text": ["a", "list"]}\n', "b.jsonl, line 1: 'text' is list"),
        ("b.jsonl", b'{"text": "ok"}\n\n{"text": "caf\xe9"}\n',
         "b.jsonl, line 3 is not valid UTF-8 .*iconv"),
        ("b.jsonl", b'{"text": "ok"}\n{"text": "a"\n', "b.jsonl, line 2 is not valid JSON"),
        ("b.jsonl", b'{"text": "ok"}\n7\n', "b.jsonl, line 2 is a JSON int, not an object"),
        ("b.json", b'[{"text": "ok"},\n {"text": 3.5}]', "b.json, item 2: 'text' is float 3.5"),
        ("b.parquet", None, "b.parquet, row 1: 'text' is int 7, not a string"),
        ("b.parquet", b"PAR1 and then no Parquet", "b.parquet, the file cannot be read as Parq"),
    ],
)  # fmt: skip
def test_a_bad_row_is_an_error_naming_the_file_and_the_row(tmp_path, name, content, message):
    good = tmp_path / f"a{name[1:]}"  # a good file first: datasets would cast the next to its types
    if name.endswith(".parquet"):
        pq.write_table(pa.table({"text": ["a good row"]}), good)
        pq.write_table(pa.table({"text": [7, 8]}), tmp_path / name)
        if content is not None:
            (tmp_path / name).write_bytes(content)
    else:
        good.write_text(json.dumps([{"text": "a good row"}]) if name.endswith(".json")
                        else json.dumps({"text": "a good row"}) + "\n")  # fmt: skip
        (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError, match=message):
        corpus.local_documents([good, tmp_path / name], cache_dir=tmp_path / "cache")


def test_blank_lines_missing_texts_and_json_arrays_are_read(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n\n{"text": null}\n{"id": 3}\n')
    (tmp_path / "b.json").write_text(json.dumps([{"text": "two"}, {"text": "three"}], indent=1))
    texts = [d.text for d in corpus.local_documents(sorted(tmp_path.iterdir()),
                                                    cache_dir=tmp_path / "cache")]  # fmt: skip
    assert sorted(texts) == ["one", "three", "two"]
