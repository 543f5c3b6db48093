"""labs/ is exactly what the generator makes from solutions/ today (run `make labs` to fix)."""

from pathlib import Path

import nbformat
import pytest

from llmlab.course.generate import make_lab, render
from llmlab.course.setup_cell import SETUP_ID

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def test_every_solution_has_a_lab_and_every_lab_a_solution():
    labs = sorted(p.name for p in (ROOT / "labs").glob("*.ipynb"))
    assert labs == [p.name for p in SOLUTIONS], "run `make labs` to regenerate labs/"
    assert SOLUTIONS, "no solution notebooks found"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_lab_is_generated_from_its_solution(solution):
    expected = render(make_lab(nbformat.read(solution, as_version=4), name=solution.name))
    lab = (ROOT / "labs" / solution.name).read_text(encoding="utf-8")
    assert lab == expected, f"labs/{solution.name} is stale: run `make labs`"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_solution_has_a_parameters_cell_first_after_the_setup_cell(solution):
    """Only the setup cell (llmlab.course.setup_cell: it installs the course where it is missing)
    runs before the profile is chosen."""
    notebook = nbformat.read(solution, as_version=4)
    setup, parameters = [cell for cell in notebook.cells if cell.cell_type == "code"][:2]
    assert setup.get("id") == SETUP_ID
    assert "parameters" in parameters.metadata.get("tags", [])


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_solution_carries_the_outputs_of_a_run(solution):
    notebook = nbformat.read(solution, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), f"{solution.name}: run it before commit"
