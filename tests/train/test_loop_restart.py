"""Starting, resuming and re-running in an out_dir: an earlier run's checkpoints are never
restarted silently, a folder without any is (a run killed before its first checkpoint restarts with
the same call), the metrics history is only ever appended to with a restart record where a run
takes over, a damaged newest checkpoint or one of another model is skipped with its reason, a
checkpoint written on a GPU resumes on a CPU, a finished run says it is complete."""

import json

import pytest
import torch
from helpers.train_fakes import RandomWindows, config, tiny_gpt2, token_stream

from llmlab.train import EarlierRun, Trainer, load_checkpoint, read_metrics, save_checkpoint


def trainer(out_dir, callbacks=(), **overrides) -> Trainer:
    settings = dict(max_steps=4, checkpoint_interval=2, out_dir=out_dir, eval_interval=2)
    data = RandomWindows(token_stream(), 4)
    return Trainer(tiny_gpt2(), config(**{**settings, **overrides}), data,
                   RandomWindows(token_stream(), 4, seed=1), callbacks=callbacks)


def logged_steps(out_dir) -> list[int | str]:
    """Every record of metrics.jsonl, in order: a step's number, or "restart N" for a restart
    record (the run that wrote it goes on after step N)."""
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").open()]
    return [f"restart {r['step']}" if r.get("event") else r["step"] for r in records]


class Killed(Exception):
    pass


def killed_at(step: int):
    def callback(metrics):
        if metrics.step == step:
            raise Killed
    return callback


def test_a_run_killed_before_its_first_checkpoint_starts_again_with_the_same_call(tmp_path, capsys):
    with pytest.raises(Killed):
        trainer(tmp_path, callbacks=[killed_at(1)]).fit(resume=True)
    (tmp_path / "checkpoints" / ".step_0000002.123-abcd1234.tmp").mkdir(parents=True)  # a torn save
    trainer(tmp_path).fit(resume=True)
    assert "starting at step 1" in capsys.readouterr().out
    assert logged_steps(tmp_path) == [1, "restart 0", 1, 2, 3, 4]
    assert [row["step"] for row in read_metrics(tmp_path)] == [1, 2, 3, 4]


def test_an_earlier_runs_checkpoints_are_never_restarted_silently(tmp_path, capsys):
    trainer(tmp_path).fit()
    with pytest.raises(EarlierRun, match=r"holds an earlier run's checkpoints.*resume=True"):
        trainer(tmp_path).fit()
    for checkpoint in (tmp_path / "checkpoints").glob("step_*"):  # both damaged
        (checkpoint / "state.pt").write_bytes(b"damaged")
    with pytest.raises(EarlierRun, match=r"holds checkpoints but none this run can resume from"
                                         r".*fresh=True"):
        trainer(tmp_path).fit(resume=True)
    assert "skipped checkpoint step_0000002: state.pt differs" in capsys.readouterr().out
    assert logged_steps(tmp_path) == [1, 2, 3, 4]  # nothing appended, nothing truncated
    assert not list(tmp_path.glob("checkpoints-before-*"))


def test_fresh_appends_the_metrics_and_sets_the_old_checkpoints_aside(tmp_path, capsys):
    trainer(tmp_path).fit()
    old_weights = (tmp_path / "checkpoints" / "step_0000004" / "model.safetensors").read_bytes()
    trainer(tmp_path, max_steps=2).fit(fresh=True)
    assert "starting fresh: the earlier checkpoints are now in" in capsys.readouterr().out
    assert logged_steps(tmp_path) == [1, 2, 3, 4, "restart 0", 1, 2]
    assert [row["step"] for row in read_metrics(tmp_path)] == [1, 2]
    csv_rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert csv_rows[0].startswith("step,") and len(csv_rows) == 1 + 7  # one header, every record
    assert csv_rows[5].startswith("0,") and csv_rows[5].endswith(",restart")
    (aside,) = tmp_path.glob("checkpoints-before-*")
    assert (aside / "step_0000004" / "model.safetensors").read_bytes() == old_weights
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_0000002"]


def test_fresh_in_a_folder_without_checkpoints_sets_nothing_aside(tmp_path, capsys):
    with pytest.raises(Killed):
        trainer(tmp_path, callbacks=[killed_at(1)]).fit()
    (tmp_path / "checkpoints" / ".step_0000002.123-abcd1234.tmp").mkdir(parents=True)  # a torn save
    trainer(tmp_path, max_steps=2).fit(fresh=True)
    assert "starting fresh" not in capsys.readouterr().out
    assert not list(tmp_path.glob("checkpoints-before-*"))  # no empty folder kept "aside"
    assert logged_steps(tmp_path) == [1, "restart 0", 1, 2]


def test_a_resume_says_where_it_resumed_and_marks_where_it_took_over(tmp_path, capsys):
    trainer(tmp_path, max_steps=2).fit()
    trainer(tmp_path, max_steps=4).fit(resume=True)
    assert "resumed from step 2 (checkpoint " in capsys.readouterr().out
    assert logged_steps(tmp_path) == [1, 2, "restart 2", 3, 4]
    restart = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[2])
    assert restart["checkpoint"] == "step_0000002"


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
    assert logged_steps(tmp_path) == [1, 2, 3, 4, "restart 2", 3, 4, 5]
    assert [row["step"] for row in read_metrics(tmp_path)] == [1, 2, 3, 4, 5]


def test_a_newest_checkpoint_of_another_model_is_skipped_and_nothing_set_aside(tmp_path, capsys):
    trainer(tmp_path, max_steps=2).fit()
    save_checkpoint(tmp_path / "checkpoints", 4, tiny_gpt2(width=64), {})  # another model's
    trainer(tmp_path, max_steps=3).fit(resume=True)
    out = capsys.readouterr().out
    assert ("skipped checkpoint step_0000004: saved from a different model "
            "(config.n_embd: checkpoint 64, model 32") in out
    assert "resumed from step 2 (checkpoint " in out
    assert not list(tmp_path.glob("checkpoints-before-*"))
    assert logged_steps(tmp_path) == [1, 2, "restart 2", 3]
    load_checkpoint(tmp_path / "checkpoints" / "step_0000003", tiny_gpt2())


def test_a_checkpoint_written_on_a_gpu_resumes_on_a_cpu(tmp_path, monkeypatch, capsys):
    """torch.save records each tensor's device; a state.pt whose tensors say cuda:0 is what a
    GPU run writes (its optimizer states live there), and torch.load alone refuses it on a
    machine without one."""
    with monkeypatch.context() as patch:
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        trainer(tmp_path, max_steps=2).fit()
    state = tmp_path / "checkpoints" / "step_0000002" / "state.pt"
    if not torch.cuda.is_available():  # the premise: this file cannot be loaded as it is here
        with pytest.raises(RuntimeError, match="deserialize object on a CUDA device"):
            torch.load(state, weights_only=True)
    resumed = trainer(tmp_path, max_steps=4)
    resumed.fit(resume=True)
    assert "resumed from step 2" in capsys.readouterr().out
    assert resumed.step == 4
    moments = [s["exp_avg"] for s in resumed.optimizer.state.values()]
    assert moments and all(m.device.type == "cpu" for m in moments)
