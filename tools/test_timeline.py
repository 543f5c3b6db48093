"""Where the test command's minutes go, worker by worker: a pytest plugin that records when each
test started and ended, and a summary of what each worker ran and how long one waited for the other
at the end. The run order in tests/conftest.py was chosen from it.

    TEST_TIMELINE=build/timeline.jsonl PYTEST_ADDOPTS="-p tools.test_timeline" make test
    .venv/bin/python tools/test_timeline.py build/timeline.jsonl
"""

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TIMELINE = "TEST_TIMELINE"  # the file the plugin appends to; unset: the plugin records nothing


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Append one line per test: its xdist worker, its id, when it started and ended (Unix s)."""
    start = time.time()
    yield
    path = os.environ.get(TIMELINE)
    if path:
        record = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid,
                  "start": start, "end": time.time()}
        with open(path, "a") as file:  # each worker appends whole lines: no two share one
            file.write(json.dumps(record) + "\n")


@dataclass
class Stretch:
    """Consecutive tests of one file on one worker (a notebook is one), in s from the start."""

    file: str
    start: float
    end: float


def stretches(records: list[dict]) -> dict[str, list[Stretch]]:
    """Each worker's run as stretches of one file, in order, timed from the first test's start."""
    if not records:
        raise ValueError("the timeline is empty: was the plugin loaded and TEST_TIMELINE set?")
    origin = min(r["start"] for r in records)
    workers: dict[str, list[Stretch]] = {}
    for r in sorted(records, key=lambda r: r["start"]):
        runs = workers.setdefault(r["worker"], [])
        file = r["test"].split("::")[0]
        if runs and runs[-1].file == file:
            runs[-1].end = r["end"] - origin
        else:
            runs.append(Stretch(file, r["start"] - origin, r["end"] - origin))
    return workers


def summary(records: list[dict], longer_than_s: float = 20.0) -> str:
    """Per worker: when it ended, and its stretches longer than `longer_than_s` seconds; then how
    long the first worker to finish waited for the last."""
    workers = stretches(records)
    ends = {worker: runs[-1].end for worker, runs in workers.items()}
    lines = []
    for worker, runs in sorted(workers.items()):
        lines.append(f"{worker}: ended at {ends[worker]:.0f} s")
        lines += [f"  {run.start:6.0f} {run.end:6.0f} {run.end - run.start:5.0f} s  {run.file}"
                  for run in runs if run.end - run.start > longer_than_s]
    wait = max(ends.values()) - min(ends.values())
    lines.append(f"the first worker to finish waited {wait:.0f} s for the last")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline", type=Path, help="the file TEST_TIMELINE named")
    parser.add_argument("--longer-than", type=float, default=20.0, metavar="S",
                        help="list the stretches of one file longer than this (default 20 s)")
    args = parser.parse_args(argv)
    try:
        records = [json.loads(line) for line in args.timeline.read_text().splitlines() if line]
        print(summary(records, args.longer_than))
    except (OSError, ValueError, KeyError) as error:
        print(f"error: {args.timeline}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
