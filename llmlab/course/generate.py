"""Make the learner's notebooks (labs/) from the instructor's (solutions/).

solutions/ is the single source. In a code cell, the lines between

    # BEGIN SOLUTION: <hint shown to the learner>
    ...
    # END SOLUTION

become `raise NotImplementedError("<hint>")` at the same indentation. Outputs, execution counts
and the saved widget state are cleared; cell ids, tags (the `parameters` cell) and markdown stay
as they are.
"""

import re
from pathlib import Path

import nbformat

BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION(?::\s*(?P<hint>.*\S))?\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
DEFAULT_HINT = "write your solution here"


class MarkerError(ValueError):
    """The solution markers in a cell are unbalanced or nested."""


def stub_source(source: str, where: str = "cell") -> str:
    """Replace each marked solution region of one cell's source by a stub."""
    out: list[str] = []
    open_marker: re.Match | None = None
    for number, line in enumerate(source.splitlines(), start=1):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if open_marker:
                raise MarkerError(f"{where}, line {number}: BEGIN SOLUTION inside another one")
            open_marker = begin
            hint = (begin["hint"] or DEFAULT_HINT).replace('"', "'")
            out.append(f'{begin["indent"]}raise NotImplementedError("{hint}")')
        elif end:
            if not open_marker:
                raise MarkerError(f"{where}, line {number}: END SOLUTION without BEGIN SOLUTION")
            open_marker = None
        elif not open_marker:
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
    """Write labs/NN_*.ipynb for every solutions/NN_*.ipynb; returns the files written."""
    labs.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(solutions.glob("[0-9][0-9]_*.ipynb")):
        lab = make_lab(nbformat.read(path, as_version=4), name=path.name)
        target = labs / path.name
        target.write_text(render(lab), encoding="utf-8")
        written.append(target)
    return written
