"""The headless course runner: executes notebooks with the profile set, collects each headline,
reports a failing lab without stopping the others."""

import nbformat
import pytest
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_code_cell, new_notebook

from llmlab.course import runner
from llmlab.course.runner import format_table, run_course


def write(path, *sources):
    nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources]), path)


def test_runner_executes_each_lab_and_reports_headline_or_failure(tmp_path):
    solutions, out = tmp_path / "solutions", tmp_path / "build"
    solutions.mkdir()
    write(
        solutions / "00_good.ipynb",
        "from llmlab.course import headline, profile",
        "headline(f'ran with {profile().name}')",
    )
    write(solutions / "01_bad.ipynb", "raise RuntimeError('boom')")

    runs = run_course(solutions, out, profile_name="smoke")

    assert [(run.notebook, run.ok) for run in runs] == [
        ("00_good.ipynb", True),
        ("01_bad.ipynb", False),
    ]
    assert runs[0].headline == "ran with smoke"
    assert "RuntimeError" in runs[1].headline and "boom" in runs[1].headline
    executed = nbformat.read(out / "00_good.ipynb", as_version=4)
    assert executed.cells[1].outputs[0].text == "Headline: ran with smoke\n"
    table = format_table(runs)
    assert "00_good.ipynb | ok" in table and "FAILED" in table


def test_runner_filters_labs_by_prefix(tmp_path):
    write(tmp_path / "00_a.ipynb", "x = 1")
    write(tmp_path / "01_b.ipynb", "raise SystemExit")
    runs = run_course(tmp_path, tmp_path / "out", profile_name="smoke", only=["00"])
    assert [run.notebook for run in runs] == ["00_a.ipynb"]


def test_threads_are_pinned_in_every_kernel_when_asked(tmp_path, monkeypatch):
    write(tmp_path / "00_a.ipynb", "import torch\nprint(torch.get_num_threads())")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # what the kernel would inherit unpinned
    run_course(tmp_path, tmp_path / "out", profile_name="smoke", threads=1)
    executed = nbformat.read(tmp_path / "out" / "00_a.ipynb", as_version=4)
    assert executed.cells[0].outputs[0].text == "1\n"
    with pytest.raises(ValueError, match="1 or more math threads"):
        run_course(tmp_path, tmp_path / "out", profile_name="smoke", threads=0)


def test_kernels_start_without_the_unencrypted_tcp_warning(tmp_path, capfd):
    """The kernel's own log goes to this process's stderr: once per lab in `make course`."""
    write(tmp_path / "00_a.ipynb", "x = 1")
    run_course(tmp_path, tmp_path / "out", profile_name="smoke")
    assert "without encryption" not in capfd.readouterr().err


class StandInClient:
    """NotebookClient without a kernel: a notebook whose cell says "hang" times out, one that
    says "die" loses its kernel (as nbclient reports them), any other runs."""

    def __init__(self, notebook, timeout, **options):
        self.notebook, self.timeout = notebook, timeout

    def execute(self):
        cell = self.notebook.cells[0]
        if cell.source == "hang":
            message = "Timeout waiting for execute reply"
            raise CellTimeoutError.error_from_timeout_and_cell(message, self.timeout, cell)
        if cell.source == "die":
            raise DeadKernelError("Kernel died")


@pytest.mark.parametrize(("source", "says"), [
    ("hang", "a cell ran past the 1800 s limit"),
    ("die", "the kernel died (out of memory?): Kernel died"),
])
def test_a_lab_that_times_out_or_loses_its_kernel_fails_and_the_next_labs_run(
    tmp_path, monkeypatch, source, says
):
    monkeypatch.setattr(runner, "NotebookClient", StandInClient)
    for name, cell in [("00_a", "x = 1"), ("01_b", source), ("02_c", "x = 2")]:
        write(tmp_path / f"{name}.ipynb", cell)
    runs = run_course(tmp_path, tmp_path / "out", profile_name="smoke")
    assert [(run.notebook, run.ok) for run in runs] == [
        ("00_a.ipynb", True), ("01_b.ipynb", False), ("02_c.ipynb", True)]
    assert runs[1].headline == f"FAILED: {says}"
    assert (tmp_path / "out" / "01_b.ipynb").exists()  # what ran before it stopped is kept
