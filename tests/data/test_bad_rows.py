"""A bad row of a local JSON Lines, JSON or Parquet file is an error naming the file and the row."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llmlab.data import corpus
from llmlab.data.errors import DataError


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
)
def test_a_bad_row_is_an_error_naming_the_file_and_the_row(tmp_path, name, content, message):
    good = tmp_path / f"a{name[1:]}"  # a good file first: datasets would cast the next to its types
    if name.endswith(".parquet"):
        pq.write_table(pa.table({"text": ["a good row"]}), good)
        pq.write_table(pa.table({"text": [7, 8]}), tmp_path / name)
        if content is not None:
            (tmp_path / name).write_bytes(content)
    else:
        good.write_text(json.dumps([{"text": "a good row"}]) if name.endswith(".json")
                        else json.dumps({"text": "a good row"}) + "\n")
        (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError, match=message):
        corpus.local_documents([good, tmp_path / name], cache_dir=tmp_path / "cache")
