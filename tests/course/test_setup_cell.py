"""The first code cell of every lab (llmlab.course.setup_cell): in every notebook, a no-op where
llmlab is installed, and on a fresh hosted runtime a clone of the course and its install."""

import importlib.util
import runpy
import subprocess
from pathlib import Path

import nbformat
import pytest

from llmlab.course.generate import render
from llmlab.course.setup_cell import (
    FOLDER,
    SETUP_CELL,
    SETUP_ID,
    repository,
    setup_cell_source,
    with_setup_cell,
    write_setup_cells,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_notebook_starts_with_the_setup_cell_before_its_parameters(path):
    cells = nbformat.read(path, as_version=4).cells
    assert cells[1].get("id") == SETUP_ID, "run `python -m llmlab.course.setup_cell`"
    assert cells[1].source == setup_cell_source(ROOT), "run `python -m llmlab.course.setup_cell`"
    assert cells[2].metadata.get("tags") == ["parameters"]


@pytest.fixture
def hosted(monkeypatch, tmp_path):
    """A runtime without llmlab: find_spec misses it; git and the installer only record calls."""
    calls = []
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llmlab" else real_find_spec(name, *a))
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: calls.append(("run", command)))
    monkeypatch.setattr(runpy, "run_path", lambda path, **kw: calls.append(("install", path)))
    monkeypatch.chdir(tmp_path)
    return calls


def run_cell(repository_url: str) -> None:
    exec(SETUP_CELL.format(repository=repository_url, folder=FOLDER), {})


def test_where_llmlab_is_installed_the_cell_does_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **kw: calls.append(a))
    monkeypatch.setattr(runpy, "run_path", lambda *a, **kw: calls.append(a))
    exec(setup_cell_source(ROOT), {})
    assert calls == []


def test_a_fresh_runtime_clones_the_course_then_installs_it(hosted):
    run_cell("https://example.org/course.git")
    assert hosted == [
        ("run", ["git", "clone", "--depth", "1", "https://example.org/course.git", FOLDER]),
        ("install", f"{FOLDER}/tools/install_here.py"),
    ]


def test_a_course_cloned_already_is_installed_without_cloning_again(hosted, tmp_path):
    (tmp_path / FOLDER).mkdir()
    run_cell("https://example.org/course.git")
    assert hosted == [("install", f"{FOLDER}/tools/install_here.py")]


def test_without_an_address_the_learner_is_told_to_clone_by_hand(hosted):
    with pytest.raises(SystemExit, match=rf"git clone <the course's git address> {FOLDER}"):
        run_cell("")
    assert hosted == []


def test_the_clone_command_fetches_a_course_with_its_installer(tmp_path):
    """The cell's git command on a stand-in for the public address: this checkout."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone from")
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", ROOT.as_uri(), FOLDER],
                   cwd=tmp_path, check=True)
    assert (tmp_path / FOLDER / "tools" / "install_here.py").is_file()


def test_the_address_comes_from_pyprojects_urls(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert repository(tmp_path) == ""
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[project.urls]\nRepository = "https://example.org/c.git"\n')
    assert repository(tmp_path) == "https://example.org/c.git"
    assert "'https://example.org/c.git'" in setup_cell_source(tmp_path)


def test_writing_the_cells_inserts_once_then_updates_in_place(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    for folder in ("solutions", "labs"):
        (tmp_path / folder).mkdir()
        notebook = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_markdown_cell("# Lab 00"),
            nbformat.v4.new_code_cell('PROFILE = "auto"', metadata={"tags": ["parameters"]})])
        (tmp_path / folder / "00_x.ipynb").write_text(render(notebook))
    assert len(write_setup_cells(tmp_path)) == 2
    assert write_setup_cells(tmp_path) == []  # already current: nothing rewritten
    path = tmp_path / "labs" / "00_x.ipynb"
    stale = with_setup_cell(nbformat.read(path, as_version=4), "old")
    path.write_text(render(stale))
    assert write_setup_cells(tmp_path) == [path]
    cells = nbformat.read(path, as_version=4).cells
    assert [cell.get("id") == SETUP_ID for cell in cells] == [False, True, False]
    assert cells[1].source == setup_cell_source(tmp_path)
