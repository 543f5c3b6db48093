"""The lab generator: solution regions become stubs, everything else is kept; bad markers fail."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from llmlab.course.generate import MarkerError, make_lab, stub_source

SOLUTION = """def area(w, h):
    # BEGIN SOLUTION: multiply the sides
    result = w * h
    return result
    # END SOLUTION

print(area(2, 3))"""


def test_solution_region_becomes_an_indented_stub_with_the_hint():
    assert stub_source(SOLUTION) == (
        'def area(w, h):\n    raise NotImplementedError("multiply the sides")\n\nprint(area(2, 3))'
    )


def test_stub_without_a_hint_gets_the_default_one():
    source = "# BEGIN SOLUTION\nx = compute()\n# END SOLUTION"
    assert stub_source(source) == 'raise NotImplementedError("write your solution here")'


def test_quotes_in_a_hint_cannot_break_the_stub():
    stub = stub_source('# BEGIN SOLUTION: use "2*m*n*k"\nx = compute()\n# END SOLUTION')
    compile(stub, "<stub>", "exec")


@pytest.mark.parametrize(
    "source, problem",
    [
        ("# BEGIN SOLUTION\nx = 1", "never closed"),
        ("x = 1\n# END SOLUTION", "without BEGIN"),
        ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION", "inside another"),
    ],
)
def test_unbalanced_markers_are_an_error(source, problem):
    with pytest.raises(MarkerError, match=problem):
        stub_source(source, where="nb, cell 3")


def test_make_lab_clears_outputs_keeps_tags_and_markdown_and_leaves_the_input_alone():
    parameters = new_code_cell('PROFILE = "auto"', metadata={"tags": ["parameters"]})
    exercise = new_code_cell(SOLUTION, execution_count=3,
                             outputs=[new_output("stream", name="stdout", text="6\n")])
    solution = new_notebook(cells=[new_markdown_cell("# Title"), parameters, exercise])
    lab = make_lab(solution)
    assert lab.cells[0].source == "# Title"
    assert lab.cells[1].metadata["tags"] == ["parameters"]
    assert "NotImplementedError" in lab.cells[2].source
    assert lab.cells[2].outputs == [] and lab.cells[2].execution_count is None
    assert solution.cells[2].outputs and "w * h" in solution.cells[2].source
    nbformat.validate(lab)


def test_make_lab_drops_the_solution_runs_widget_state():
    state = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    solution = new_notebook(cells=[new_code_cell("x = 1")], metadata={"widgets": state})
    solution.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    lab = make_lab(solution)
    assert "widgets" not in lab.metadata and lab.metadata["kernelspec"]["name"] == "python3"
    assert "widgets" in solution.metadata


def test_a_region_of_plain_assignments_becomes_values_to_fill_in_not_a_stop():
    source = (
        "N = 8\n# BEGIN SOLUTION: your two guesses in TFLOP/s\nPREDICTED_FP32 = 0.3\n"
        "PREDICTED_BF16 = 1.0\n# END SOLUTION\nprint(N)"
    )
    assert stub_source(source) == (
        "N = 8\n# your two guesses in TFLOP/s\nPREDICTED_FP32 = ...\nPREDICTED_BF16 = ...\nprint(N)"
    )


def test_a_region_with_any_other_statement_still_raises():
    source = "# BEGIN SOLUTION: guess\nGUESS = 0.3\nprint(GUESS)\n# END SOLUTION"
    assert stub_source(source) == 'raise NotImplementedError("guess")'
