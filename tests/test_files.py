"""llmlab.files: a folder written atomically is replaced whole or not at all; checksum lists of
saved artifacts: a list is what sha256sum writes; every kind of damage (a
changed file, a missing one, a lost or damaged list, a file the list does not name) is refused
with the artifact, the file and what to do."""

import hashlib

import pytest

from llmlab.files import (
    FOLDER_CHECKSUMS,
    DamagedFile,
    atomic_folder,
    checksums_beside,
    verify_checksums,
    verify_folder,
    write_checksums,
    write_folder_checksums,
)


def verify(path):
    verify_checksums(checksums_beside(path), f"artifact {path}", "Save it again", [path.name])


def test_a_checksum_list_is_what_sha256sum_writes(tmp_path):
    path = tmp_path / "masks.safetensors"
    path.write_bytes(b"some bytes")
    write_checksums(checksums_beside(path), [path.name])
    digest = hashlib.sha256(b"some bytes").hexdigest()
    assert (tmp_path / "masks.safetensors.sha256").read_text() == f"{digest}  masks.safetensors\n"
    verify(path)  # intact: no error


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: p.write_bytes(b"some bytez"), "data.bin differs from the sha256 recorded"),
        (lambda p: p.write_bytes(b"some"), "data.bin differs from the sha256 recorded"),
        (lambda p: p.unlink(), "data.bin is missing"),
        (lambda p: checksums_beside(p).unlink(), "data.bin.sha256 is missing"),
        (lambda p: checksums_beside(p).write_text("not a checksum\n"), "has a damaged line 1"),
        (lambda p: checksums_beside(p).write_text(""), "records no checksum for data.bin"),
    ],
    ids=["changed byte", "truncated", "file lost", "list lost", "list damaged", "list empty"],
)
def test_damage_is_refused_naming_the_file_and_what_to_do(tmp_path, damage, message):
    path = tmp_path / "data.bin"
    path.write_bytes(b"some bytes")
    write_checksums(checksums_beside(path), [path.name])
    damage(path)
    with pytest.raises(DamagedFile, match=f"artifact .*data.bin is damaged: .*{message}") as caught:
        verify(path)
    assert str(caught.value).endswith("Save it again")
    assert isinstance(caught.value, ValueError)  # bad input, as the data layer's DataError


def test_a_folder_lists_every_file_and_refuses_an_unlisted_one(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    write_folder_checksums(tmp_path)
    listed = (tmp_path / FOLDER_CHECKSUMS).read_text().splitlines()
    assert [line.split("  ")[1] for line in listed] == ["config.json", "model.safetensors"]
    verify_folder(tmp_path, "model", "Save it again")
    (tmp_path / "notes.txt").write_text("read by no loader: allowed")
    verify_folder(tmp_path, "model", "Save it again")
    (tmp_path / "extra.safetensors").write_bytes(b"would be loaded unchecked")
    with pytest.raises(DamagedFile, match="records no checksum for extra.safetensors"):
        verify_folder(tmp_path, "model", "Save it again")
    with pytest.raises(DamagedFile, match="the folder does not exist"):
        verify_folder(tmp_path / "nothing", "model", "Save it again")


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
