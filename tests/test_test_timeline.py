"""tools/test_timeline.py: the plugin records each test's worker and times, and the summary reads
each worker's stretches and the wait at the end from them."""

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("test_timeline", ROOT / "tools" / "test_timeline.py")
timeline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timeline)


def record(worker, test, start, end):
    return {"worker": worker, "test": test, "start": 1000.0 + start, "end": 1000.0 + end}


RECORDS = [
    record("gw0", "solutions/03.ipynb::Cell 0", 0, 1),
    record("gw1", "tests/a.py::test_one", 2, 30),
    record("gw0", "solutions/03.ipynb::Cell 1", 1, 400),  # one stretch with Cell 0
    record("gw1", "tests/b.py::test_two", 30, 35),
    record("gw1", "tests/a.py::test_three", 35, 90),  # a.py again: a stretch of its own
]


def test_a_workers_consecutive_tests_of_one_file_are_one_stretch_timed_from_the_first_start():
    workers = timeline.stretches(RECORDS)
    assert [(s.file, s.start, s.end) for s in workers["gw0"]] == [("solutions/03.ipynb", 0, 400)]
    assert [(s.file, s.start, s.end) for s in workers["gw1"]] == [
        ("tests/a.py", 2, 30), ("tests/b.py", 30, 35), ("tests/a.py", 35, 90)]


def test_the_summary_lists_long_stretches_and_the_wait_at_the_end():
    text = timeline.summary(RECORDS, longer_than_s=20)
    assert "gw0: ended at 400 s" in text and "gw1: ended at 90 s" in text
    assert "solutions/03.ipynb" in text and "tests/b.py" not in text  # 5 s: not listed
    assert text.endswith("the first worker to finish waited 310 s for the last")


def test_an_empty_timeline_says_what_to_check(tmp_path, capsys):
    empty = tmp_path / "timeline.jsonl"
    empty.write_text("")
    assert timeline.main([str(empty)]) == 1
    assert "was the plugin loaded and TEST_TIMELINE set?" in capsys.readouterr().err
    assert timeline.main([str(tmp_path / "missing.jsonl")]) == 1


def run_hook(item):
    hook = timeline.pytest_runtest_protocol(item, None)
    next(hook)
    with pytest.raises(StopIteration):
        hook.send(None)  # the test has run


def test_the_plugin_appends_a_line_per_test_only_when_asked(tmp_path, monkeypatch):
    path = tmp_path / "timeline.jsonl"
    monkeypatch.delenv(timeline.TIMELINE, raising=False)
    run_hook(SimpleNamespace(nodeid="tests/a.py::test_one"))
    assert not path.exists()
    monkeypatch.setenv(timeline.TIMELINE, str(path))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    run_hook(SimpleNamespace(nodeid="tests/a.py::test_one"))
    run_hook(SimpleNamespace(nodeid="tests/a.py::test_two"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["worker"], r["test"]) for r in lines] == [("gw1", "tests/a.py::test_one"),
                                                         ("gw1", "tests/a.py::test_two")]
    assert all(r["start"] <= r["end"] for r in lines)
