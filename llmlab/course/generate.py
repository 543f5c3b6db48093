"""Make the learner's notebooks (labs/) from the instructor's (solutions/).

solutions/ is the single source. In a code cell, the lines between

    # BEGIN SOLUTION: <hint shown to the learner>
    ...
    # END SOLUTION

become `raise NotImplementedError("<hint>")` at the same indentation. A region that only
assigns literal values (`NAME = 0.3` lines: a prediction, a number the learner writes down)
becomes the hint as a comment and `NAME = ...` lines instead, so "Run All" does not stop there.
Outputs, execution counts and the saved widget state are cleared; cell ids, tags (the
`parameters` cell) and markdown stay as they are.
"""

import ast
import re
from pathlib import Path

import nbformat

from llmlab.course.runner import find_notebooks

BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION(?::\s*(?P<hint>.*\S))?\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
DEFAULT_HINT = "write your solution here"


class MarkerError(ValueError):
    """The solution markers in a cell are unbalanced or nested."""


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def _assigned_names(region: list[str]) -> list[str] | None:
    """The names a region assigns when it is nothing but `NAME = literal` lines, else None."""
    try:
        body = ast.parse("\n".join(line.strip() for line in region)).body
    except SyntaxError:
        return None
    simple = all(
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and _is_literal(node.value)
        for node in body
    )
    return [node.targets[0].id for node in body] if body and simple else None


def _stub(indent: str, hint: str, region: list[str]) -> list[str]:
    names = _assigned_names(region)
    if names:
        return [f"{indent}# {hint}", *(f"{indent}{name} = ..." for name in names)]
    return [f'{indent}raise NotImplementedError("{hint}")']


def stub_source(source: str, where: str = "cell") -> str:
    """Replace each marked solution region of one cell's source by a stub."""
    out: list[str] = []
    open_marker: re.Match | None = None
    region: list[str] = []
    for number, line in enumerate(source.splitlines(), start=1):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if open_marker:
                raise MarkerError(f"{where}, line {number}: BEGIN SOLUTION inside another one")
            open_marker, region = begin, []
        elif end:
            if not open_marker:
                raise MarkerError(f"{where}, line {number}: END SOLUTION without BEGIN SOLUTION")
            hint = (open_marker["hint"] or DEFAULT_HINT).replace('"', "'")
            out.extend(_stub(open_marker["indent"], hint, region))
            open_marker = None
        elif open_marker:
            region.append(line)
        else:
            out.append(line)
    if open_marker:
        raise MarkerError(f"{where}: BEGIN SOLUTION is never closed by END SOLUTION")
    return "\n".join(out)


def make_lab(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """The lab notebook for a solution notebook (a new object; the input is not changed)."""
    lab = nbformat.from_dict(solution)  # deep copy
    # Saved widget state (the solution run's progress bars) belongs to outputs a lab does not have.
    lab.metadata.pop("widgets", None)
    for index, cell in enumerate(lab.cells):
        if cell.cell_type != "code":
            continue
        cell.source = stub_source(cell.source, where=f"{name}, cell {index}")
        cell.outputs = []
        cell.execution_count = None
    return lab


def render(notebook: nbformat.NotebookNode) -> str:
    """The exact text written to disk, so a test can compare files byte for byte."""
    return nbformat.writes(notebook) + "\n"


def generate_labs(solutions: Path, labs: Path) -> list[Path]:
    """Write labs/NN_*.ipynb for every solutions/NN_*.ipynb; returns the files written.
    A missing `solutions` folder, or one without lab notebooks, is a ValueError."""
    notebooks = find_notebooks(solutions)
    labs.mkdir(parents=True, exist_ok=True)
    written = []
    for path in notebooks:
        lab = make_lab(nbformat.read(path, as_version=4), name=path.name)
        target = labs / path.name
        target.write_text(render(lab), encoding="utf-8")
        written.append(target)
    return written
