"""Loading a notebook's functions: imports and definitions run, other statements do not."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from llmlab.course.notebook_code import load_definitions


def test_load_definitions_runs_imports_and_defs_but_not_other_statements(tmp_path):
    path = tmp_path / "nb.ipynb"
    cells = [
        "%matplotlib inline\nimport math",
        "def circle(r):\n    return math.pi * r * r",
        "raise RuntimeError('top-level code must not run')",
    ]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), path)
    namespace = load_definitions(path, ["circle"])
    assert namespace["circle"](1.0) == pytest.approx(3.14159, rel=1e-5)
    with pytest.raises(LookupError, match="square"):
        load_definitions(path, ["square"])


def test_loaded_definitions_can_read_their_own_source(tmp_path):
    # triton.jit reads a kernel's source with inspect: it must get the function, not the JSON
    # of the notebook file.
    path = tmp_path / "nb.ipynb"
    cell = "import inspect\n\ndef show():\n    return inspect.getsource(show)"
    nbformat.write(new_notebook(cells=[new_code_cell(cell)]), path)
    source = load_definitions(path, ["show"])["show"]()
    assert source == "def show():\n    return inspect.getsource(show)"
