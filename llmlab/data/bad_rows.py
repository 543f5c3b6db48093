"""Check that every row of a JSON-lines or Parquet file holds text, and name the row that does not.

Why before `datasets` reads the files: it casts every file to the first file's column types (an
int `text` in a later file silently becomes "5"), reports invalid UTF-8 and bad JSON without a
file or row, and lets a number through to fail much later. pyarrow checks a file's column fast
(Parquet: from its metadata alone); only a file that fails is read again, row by row, to find
the row to fix.
"""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from llmlab.data.errors import DataError


def check_text_column(kind: str, path: Path, field: str) -> None:
    """Raise a DataError naming `path` and its first bad row unless every `field` is text.

    `kind` is "json" or "parquet" (other kinds pass). A file without `field` passes: the caller
    reports a missing column once, for all files.
    """
    if kind not in ROW_FINDERS or _column_is_text(kind, Path(path), field):
        return
    problem = ROW_FINDERS[kind](Path(path), field)
    if problem:
        raise DataError(f"{path}, {problem}.")
    # No bad row found (a .json file holding one array, which pyarrow does not read): datasets
    # reads such files itself, and the row-by-row reading above has checked their types.


def _column_is_text(kind: str, path: Path, field: str) -> bool:
    try:
        if kind == "parquet":
            schema = pq.read_schema(path)
            return field not in schema.names or _is_text(schema.field(field).type)
        table = pa_json.read_json(path)
        if field not in table.column_names:
            return True
        column = table.column(field)
        column.validate(full=True)  # checks that the strings are valid UTF-8
        return _is_text(column.type)
    except (pa.ArrowException, OSError):
        return False  # not readable this way: the row-by-row reading says why


def _is_text(arrow_type: pa.DataType) -> bool:
    """Strings, or nulls only (every value missing: rows that are skipped)."""
    return arrow_type in (pa.string(), pa.large_string(), pa.null())


def json_problem(path: Path, field: str) -> str | None:
    """The first bad row of a .jsonl/.json file ("line N: why"), or None when all are good."""
    data = path.read_bytes()
    if path.suffix.lower() == ".json":
        try:
            document = json.loads(data)
        except ValueError:
            pass  # not one JSON document: JSON lines, as `datasets` reads it too
        else:
            rows = document if isinstance(document, list) else [document]
            return _first_problem(((f"item {n}", row) for n, row in enumerate(rows, 1)), field)
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as error:
            bad = line[error.start : error.start + 4]
            return (f"line {number} is not valid UTF-8 (byte {error.start} of the line: {bad!r}):"
                    " convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8`")
        except json.JSONDecodeError as error:
            return (f"line {number} is not valid JSON ({error.msg} at column {error.colno}): "
                    "fix or remove that line")
        problem = _first_problem([(f"line {number}", row)], field)
        if problem:
            return problem
    return None


def parquet_problem(path: Path, field: str) -> str | None:
    """The first row of a Parquet file whose `field` is not text ("row N: why"), or None."""
    try:
        values = pq.read_table(path, columns=[field]).column(field).to_pylist()
    except (pa.ArrowException, OSError) as error:
        return f"the file cannot be read as Parquet ({error}): rewrite it or leave it out"
    return _first_problem(((f"row {n}", {field: v}) for n, v in enumerate(values, 1)), field)


def _first_problem(rows, field: str) -> str | None:
    """The first (where, row) whose row is not an object with a text (or no) `field`."""
    for where, row in rows:
        if not isinstance(row, dict):
            return f"{where} is a JSON {type(row).__name__}, not an object with a {field!r} field"
        value = row.get(field)
        if value is not None and not isinstance(value, str):
            return (f"{where}: {field!r} is {type(value).__name__} {str(value)[:40]}, not a string:"
                    " store texts as strings (null or a missing field skips the row)")
    return None


ROW_FINDERS = {"json": json_problem, "parquet": parquet_problem}
