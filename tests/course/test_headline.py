"""Headline recording: printed, and written where the course runner asks."""

import json

from llmlab.course import headline


def test_headline_prints_and_records_when_the_runner_asks(tmp_path, monkeypatch, capsys):
    target = tmp_path / "headline.json"
    monkeypatch.setenv("LLMLAB_HEADLINE_FILE", str(target))
    headline("42 TFLOP/s")
    assert capsys.readouterr().out == "Headline: 42 TFLOP/s\n"
    assert json.loads(target.read_text()) == {"headline": "42 TFLOP/s"}
