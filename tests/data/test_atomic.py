"""Whole-folder atomic writes: a folder is replaced whole or not at all."""

import pytest

from llmlab.data.atomic import atomic_folder


def test_a_folder_written_atomically_is_replaced_whole_or_not_at_all(tmp_path):
    target = tmp_path / "model"
    with atomic_folder(target) as folder:
        (folder / "a.json").write_text("old")
    with pytest.raises(RuntimeError), atomic_folder(target) as folder:
        (folder / "a.json").write_text("new")
        raise RuntimeError("killed half-way")
    assert (target / "a.json").read_text() == "old"  # the old folder, untouched
    with atomic_folder(target) as folder:
        (folder / "b.json").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["b.json"]  # replaced whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary left
