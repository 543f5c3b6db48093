"""The first code cell of every lab. On Colab, Kaggle or any Jupyter where the course is not
installed, it clones the course and installs it into the running Python with
tools/install_here.py, which keeps the platform's PyTorch. Where `llmlab` is importable (a
checkout, after `make lab`) it does nothing, so it changes no stored run.

The cell clones from the course's public git address, pyproject.toml's `[project.urls]
Repository`. A copy of the course that names none gets a cell that asks the learner to clone it
by hand. `llmlab make-labs` writes the cell into labs/ with the rest of the solution notebook;
tests/course/test_setup_cell.py checks that every notebook holds it and runs it with a stand-in
repository.
"""

import tomllib
from pathlib import Path

import nbformat

from llmlab.course.generate import render
from llmlab.course.runner import find_notebooks

FOLDER = "llm-training-lab"  # where the cell clones the course, beside the notebook
SETUP_ID = "setup"  # the cell's id in every notebook

SETUP_CELL = '''\
# On Colab, Kaggle or any Jupyter without the course, this cell installs it into this Python
# (a few minutes; the platform's PyTorch is kept). Where llmlab is installed it does nothing.
import importlib.util

if importlib.util.find_spec("llmlab") is None:
    import os, runpy, subprocess
    REPOSITORY, FOLDER = {repository!r}, {folder!r}
    if not os.path.isdir(FOLDER):
        if not REPOSITORY:
            raise SystemExit("This copy of the course names no address to install it from: "
                             f"run `!git clone <the course's git address> {{FOLDER}}`, then "
                             "this cell again.")
        subprocess.run(["git", "clone", "--depth", "1", REPOSITORY, FOLDER], check=True)
    runpy.run_path(f"{{FOLDER}}/tools/install_here.py", run_name="__main__")'''


def repository(root: Path) -> str:
    """The course's public git address from pyproject.toml, or "" when it names none."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project.get("urls", {}).get("Repository", "")


def setup_cell_source(root: Path) -> str:
    return SETUP_CELL.format(repository=repository(root), folder=FOLDER)


def with_setup_cell(notebook: nbformat.NotebookNode, source: str) -> nbformat.NotebookNode:
    """The notebook with `source` as its setup cell: the cell with id SETUP_ID, else a new cell
    after the introduction (the first cell)."""
    for cell in notebook.cells:
        if cell.get("id") == SETUP_ID:
            cell.source = source
            return notebook
    cell = nbformat.v4.new_code_cell(source, id=SETUP_ID)
    notebook.cells.insert(1, cell)
    return notebook


def write_setup_cells(root: Path) -> list[Path]:
    """Put the current setup cell into every notebook of solutions/ and labs/; the files changed.
    Run it (`python -m llmlab.course.setup_cell`) after editing SETUP_CELL or the address."""
    source, changed = setup_cell_source(root), []
    for path in [*find_notebooks(root / "solutions"), *find_notebooks(root / "labs")]:
        text = path.read_text(encoding="utf-8")
        updated = render(with_setup_cell(nbformat.reads(text, as_version=4), source))
        if updated != text:
            path.write_text(updated, encoding="utf-8")
            changed.append(path)
    return changed


if __name__ == "__main__":
    for path in write_setup_cells(Path(__file__).resolve().parents[2]):
        print(f"wrote {path}")
