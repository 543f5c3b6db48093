"""Checkpoints you can trust: damage is detected before anything loads, a damaged newest checkpoint
(or one of another model) falls back to an older intact one, pruning keeps the last intact one,
debris of killed saves and prunes is swept, and a damaged best.json is rewritten instead of
crashing a save."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from helpers.train_fakes import tiny_gpt2

from llmlab.train import (
    CheckpointCorrupt,
    best_checkpoint,
    load_checkpoint,
    newest_verified_checkpoint,
    save_checkpoint,
    sweep_stale_temporaries,
    verify_checkpoint,
)
from llmlab.train import checkpoint as checkpoint_module


def save(root: Path, step: int, **options) -> Path:
    """A small but real checkpoint: the tiny model's weights and a state with tensors in it."""
    model = tiny_gpt2()
    state = {"data": {"generator": torch.Generator().manual_seed(step).get_state()}}
    return save_checkpoint(root, step, model, state, **options)


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def step_folders(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("step_"))


# ---------------------------------------------------------------- detection


@pytest.mark.parametrize("name", ["model.safetensors", "state.pt", "meta.json"])
def test_a_flipped_byte_in_any_file_is_refused_before_anything_loads(tmp_path, name):
    path = save(tmp_path, 2)
    flip_middle_byte(path / name)
    model = tiny_gpt2(seed=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointCorrupt, match=rf"step_0000002.*{name}.*differs from the sha256"):
        load_checkpoint(path, model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("name", ["model.safetensors", "state.pt"])
def test_a_truncated_file_is_reported_as_damaged_not_as_a_library_error(tmp_path, name):
    path = save(tmp_path, 2)
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[: len(data) // 2])  # an interrupted copy
    with pytest.raises(CheckpointCorrupt, match=name):
        load_checkpoint(path, tiny_gpt2())


@pytest.mark.parametrize(
    "damage, file",
    [
        (lambda p: (p / "meta.json").write_text("{not json"), "meta.json"),
        (lambda p: (p / "state.pt").unlink(), "state.pt is missing"),
        (lambda p: (p / "checksums.sha256").unlink(), "checksums.sha256 is missing"),
        (lambda p: (p / "checksums.sha256").write_text("garbage\n"), "checksums.sha256 has a"),
    ],
    ids=["bad-json", "missing-file", "no-checksums", "bad-checksums"],
)
def test_every_kind_of_damage_raises_checkpoint_corrupt_with_advice(tmp_path, damage, file):
    path = save(tmp_path, 2)
    damage(path)
    with pytest.raises(CheckpointCorrupt, match=file) as raised:
        load_checkpoint(path, tiny_gpt2())
    assert "newest_verified_checkpoint" in str(raised.value)  # says what to do
    with pytest.raises(CheckpointCorrupt):
        verify_checkpoint(path)


def test_an_intact_checkpoint_verifies_and_loads(tmp_path):
    path = save(tmp_path, 2)
    verify_checkpoint(path)
    assert load_checkpoint(path, tiny_gpt2(seed=1))["step"] == 2


# ---------------------------------------------------------------- fallback and pruning


def test_a_damaged_newest_checkpoint_falls_back_to_the_older_intact_one(tmp_path):
    save(tmp_path, 2)
    newest = save(tmp_path, 4)
    flip_middle_byte(newest / "model.safetensors")
    path, skipped = newest_verified_checkpoint(tmp_path)
    assert path == tmp_path / "step_0000002"
    assert len(skipped) == 1
    assert "step_0000004" in skipped[0] and "model.safetensors" in skipped[0]
    assert newest_verified_checkpoint(tmp_path / "nothing here") == (None, [])


def test_a_newest_checkpoint_of_another_model_is_passed_over_like_a_damaged_one(tmp_path):
    save(tmp_path, 2)
    save_checkpoint(tmp_path, 4, tiny_gpt2(width=64), {})
    assert newest_verified_checkpoint(tmp_path)[0] == tmp_path / "step_0000004"  # it is intact
    path, skipped = newest_verified_checkpoint(tmp_path, tiny_gpt2())
    assert path == tmp_path / "step_0000002"
    (reason,) = skipped
    assert re.fullmatch(r"skipped checkpoint step_0000004: saved from a different model "
                        r"\(config.n_embd: checkpoint 64, model 32; \d+ more differences\)",
                        reason)
    path, skipped = newest_verified_checkpoint(tmp_path, tiny_gpt2(width=16))  # fits neither
    assert path is None
    assert [reason.split(": saved")[0] for reason in skipped] == [
        "skipped checkpoint step_0000004", "skipped checkpoint step_0000002"]


def test_pruning_does_not_count_a_damaged_checkpoint_so_the_older_intact_one_stays(tmp_path):
    save(tmp_path, 2, keep_last=2)
    flip_middle_byte(save(tmp_path, 4, keep_last=2) / "state.pt")
    save(tmp_path, 6, keep_last=2)  # keeps 2 intact ones: 6 and 2 (4 is damaged)
    assert step_folders(tmp_path) == ["step_0000002", "step_0000004", "step_0000006"]
    verify_checkpoint(tmp_path / "step_0000002")
    save(tmp_path, 8, keep_last=2)  # now 8 and 6 are intact: the older ones go, damaged or not
    assert step_folders(tmp_path) == ["step_0000006", "step_0000008"]


def test_pruning_never_deletes_the_checkpoint_it_just_saved(tmp_path):
    save(tmp_path, 4, keep_last=1)
    flip_middle_byte(save(tmp_path, 6, keep_last=1) / "model.safetensors")
    save(tmp_path, 5, keep_last=1)  # resumed from 4, saving at another interval
    assert newest_verified_checkpoint(tmp_path)[0] == tmp_path / "step_0000005"


# ---------------------------------------------------------------- debris of killed runs


def test_debris_of_a_killed_save_and_a_killed_prune_is_swept(tmp_path, monkeypatch):
    save(tmp_path, 1, keep_last=1)

    def killed_mid_write(*args, **kwargs):
        raise KeyboardInterrupt("killed while writing state.pt")

    monkeypatch.setattr(checkpoint_module.torch, "save", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        save(tmp_path, 2, keep_last=1)
    monkeypatch.undo()

    def killed_mid_delete(path, *args, **kwargs):
        if Path(path).is_dir():  # (the save also asks to remove a folder that is not there)
            (Path(path) / "model.safetensors").unlink()  # the deletion had begun
            raise KeyboardInterrupt("killed while pruning")

    monkeypatch.setattr(shutil, "rmtree", killed_mid_delete)
    with pytest.raises(KeyboardInterrupt):
        save(tmp_path, 3, keep_last=1)  # saved, then killed while pruning step 1
    monkeypatch.undo()

    assert step_folders(tmp_path) == ["step_0000003"]  # no half-deleted step_0000001
    removed = sweep_stale_temporaries(tmp_path)
    assert len(removed) == 2  # the half-written step 2 and the half-deleted step 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_0000003"]
    assert sweep_stale_temporaries(tmp_path) == []
    verify_checkpoint(tmp_path / "step_0000003")


# ---------------------------------------------------------------- best.json


@pytest.mark.parametrize(
    "damaged", ["{broken", "[]", json.dumps({"val_loss": 1.0}), json.dumps({"checkpoint": 3})]
)
def test_a_damaged_best_json_counts_as_absent_and_is_rewritten_at_the_next_save(tmp_path, damaged):
    save(tmp_path, 2, val_loss=3.0)
    (tmp_path / "best.json").write_text(damaged)
    assert best_checkpoint(tmp_path) is None
    save(tmp_path, 4, val_loss=5.0)
    assert best_checkpoint(tmp_path) == tmp_path / "step_0000004"
    assert json.loads((tmp_path / "best.json").read_text())["val_loss"] == 5.0
