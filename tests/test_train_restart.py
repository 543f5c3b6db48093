"""Starting, resuming and re-running in an out_dir: never a silent restart, the metrics history is
only ever appended to, a damaged newest checkpoint is skipped with its reason, a finished run says
it is complete."""

import json

import pytest
from test_train import config
from train_fakes import RandomWindows, tiny_gpt2, token_stream

from llmlab.train import EarlierRun, Trainer


def trainer(out_dir, **overrides) -> Trainer:
    settings = dict(max_steps=4, checkpoint_interval=2, out_dir=out_dir, eval_interval=2)
    data = RandomWindows(token_stream(), 4)
    return Trainer(tiny_gpt2(), config(**{**settings, **overrides}), data,
                   RandomWindows(token_stream(), 4, seed=1))  # fmt: skip


def logged_steps(out_dir) -> list[int]:
    return [json.loads(line)["step"] for line in (out_dir / "metrics.jsonl").open()]


def test_an_earlier_run_without_checkpoints_is_not_restarted_silently(tmp_path):
    trainer(tmp_path).fit()
    for path in (tmp_path / "checkpoints").iterdir():  # the checkpoints are lost
        path.rename(tmp_path / f"lost-{path.name}")
    (tmp_path / "checkpoints").rmdir()
    csv_before = (tmp_path / "metrics.csv").read_text()
    with pytest.raises(EarlierRun, match=r"earlier run \(metrics.jsonl, metrics.csv\).*fresh=True"):
        trainer(tmp_path).fit(resume=True)
    with pytest.raises(EarlierRun, match="resume=True"):
        trainer(tmp_path).fit()
    assert logged_steps(tmp_path) == [1, 2, 3, 4]  # nothing truncated
    assert (tmp_path / "metrics.csv").read_text() == csv_before


def test_fresh_appends_the_metrics_and_sets_the_old_checkpoints_aside(tmp_path, capsys):
    trainer(tmp_path).fit()
    old_weights = (tmp_path / "checkpoints" / "step_0000004" / "model.safetensors").read_bytes()
    trainer(tmp_path, max_steps=2).fit(fresh=True)
    assert "starting fresh: the earlier checkpoints are now in" in capsys.readouterr().out
    assert logged_steps(tmp_path) == [1, 2, 3, 4, 1, 2]
    csv_rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert csv_rows[0].startswith("step,") and len(csv_rows) == 1 + 6  # one header, every row
    (aside,) = tmp_path.glob("checkpoints-before-*")
    assert (aside / "step_0000004" / "model.safetensors").read_bytes() == old_weights
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_0000002"]


def test_a_resume_says_where_it_resumed_and_appends(tmp_path, capsys):
    trainer(tmp_path, max_steps=2).fit()
    trainer(tmp_path, max_steps=4).fit(resume=True)
    assert "resumed from step 2 (checkpoint " in capsys.readouterr().out
    assert logged_steps(tmp_path) == [1, 2, 3, 4]


def test_a_finished_run_says_it_is_complete_and_reports_its_validation_loss(tmp_path, capsys):
    first = trainer(tmp_path).fit()
    again = trainer(tmp_path).fit(resume=True)
    assert "is already complete (step 4, max_steps 4)" in capsys.readouterr().out
    assert again.history == [] and again.final_step == 4
    assert again.val_loss == pytest.approx(first.val_loss)
    assert logged_steps(tmp_path) == [1, 2, 3, 4]


def test_a_damaged_newest_checkpoint_is_skipped_with_its_reason(tmp_path, capsys):
    trainer(tmp_path).fit()
    weights = tmp_path / "checkpoints" / "step_0000004" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF  # one flipped byte in the weights
    weights.write_bytes(data)
    stale = tmp_path / "checkpoints" / ".step_0000006.123-abcd1234.tmp"  # a killed save's folder
    stale.mkdir()
    trainer(tmp_path, max_steps=5).fit(resume=True)
    out = capsys.readouterr().out
    assert "removed .step_0000006.123-abcd1234.tmp" in out and not stale.exists()
    assert "skipped checkpoint step_0000004: model.safetensors differs" in out
    assert "resumed from step 2 (checkpoint " in out
    assert logged_steps(tmp_path) == [1, 2, 3, 4, 3, 4, 5]
