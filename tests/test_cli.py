"""`llmlab doctor`: a true report here, JSON for bug reports, exit 1 on a broken stack.
`llmlab course`: bad arguments are one-line errors with exit code 2."""

import dataclasses
import json
import os
import subprocess
import sys

import nbformat
import pytest
from helpers.fake_machines import ALL_PACKAGES, T4, cuda_box, gpus, h100_box, make_report
from nbformat.v4 import new_code_cell, new_notebook

from llmlab import cli, env
from llmlab.course import labs, profile


def test_doctor_runs_as_a_module_and_reports_this_machine():
    quiet = {k: v for k, v in os.environ.items() if k != "LLMLAB_PROFILE"}
    result = subprocess.run(
        [sys.executable, "-m", "llmlab", "doctor"], capture_output=True, text=True, timeout=120,
        env=quiet,
    )
    report = env.collect(include_frameworks=False)
    broken = any(p.severity == "error" for p in env.diagnose(report))
    assert result.returncode == (1 if broken else 0), result.stderr
    assert "== PyTorch ==" in result.stdout and "Labs on this machine" in result.stdout
    (lab_03,) = [line for line in result.stdout.splitlines() if "03 Training on one GPU" in line]
    profile_cell = lab_03.split("|")[1].strip()  # "03 Training on one GPU | <profile> | why"
    assert profile_cell == profile("auto", lab=3).name


@pytest.fixture
def fake_machine(monkeypatch):
    """Make the doctor see a machine of the test's choosing, with LLMLAB_PROFILE unset."""
    monkeypatch.delenv("LLMLAB_PROFILE", raising=False)

    def use(report):
        monkeypatch.setattr(env, "collect", lambda include_frameworks=True: report)

    return use


def test_doctor_json_is_parseable_and_complete(fake_machine, capsys):
    fake_machine(h100_box())
    assert cli.main(["doctor", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert len(payload["gpus"]) == 8 and payload["gpus"][0]["bf16"] is True
    assert {lab["profile"] for lab in payload["labs"]} == {"full"}


def test_doctor_on_a_cpu_machine_says_so_and_gives_smoke_for_every_lab(fake_machine, capsys):
    fake_machine(make_report())
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "No CUDA GPU" in out
    assert 'profile("auto", lab=N) picks the same' in out


def test_doctor_on_a_t4_shows_the_training_labs_at_consumer_and_why(fake_machine, capsys):
    fake_machine(cuda_box(gpus=gpus(T4)))
    cli.main(["doctor"])
    (lab_03,) = [line for line in capsys.readouterr().out.splitlines()
                 if "03 Training on one GPU" in line]
    _, name, why = (cell.strip() for cell in lab_03.split("|")[:3])
    assert name == "consumer"
    assert why == ("Tesla T4 has 15.8 GB (full needs 20 GB): GPT-2 small in smaller "
                   "micro-batches; no bf16 (compute capability 7.5): the trainer runs fp16 "
                   "with a grad scaler")


def test_doctor_says_when_llmlab_profile_overrides_the_table(fake_machine, capsys, monkeypatch):
    fake_machine(make_report())
    monkeypatch.setenv("LLMLAB_PROFILE", "full")
    cli.main(["doctor"])
    out = capsys.readouterr().out
    assert "LLMLAB_PROFILE=full is set: every lab runs at the full profile" in out


def test_doctor_lines_up_the_lab_table_planned_rows_included(fake_machine, capsys, monkeypatch):
    fake_machine(make_report())
    planned = dataclasses.replace(labs.LABS[-1], ready=False)  # a lab announced, not written yet
    monkeypatch.setattr(labs, "LABS", (*labs.LABS[:-1], planned))
    cli.main(["doctor"])
    out = capsys.readouterr().out
    table = out[out.index("Labs on this machine") :].splitlines()[1 : 3 + len(labs.LABS)]
    header, _rule, *rows = table
    assert len(rows) == len(labs.LABS) and "(planned)" in rows[-1]
    columns = {header.index("profile")} | {row.index(" smoke ") + 1 for row in rows}
    assert len(columns) == 1


def test_doctor_says_which_lab_needs_an_optional_package_and_how_to_install_it(
    fake_machine, capsys
):
    fake_machine(make_report(packages={**ALL_PACKAGES, "gptqmodel": None, "optimum": None}))
    assert cli.main(["doctor"]) == 0  # optional: not an error
    rows = [line.split(":", 1) for line in capsys.readouterr().out.splitlines()]
    status = {key.strip(): value.strip() for key, value in (row for row in rows if len(row) == 2)}
    for name in ("gptqmodel", "optimum"):
        assert status[name].startswith("not installed (optional: Lab 07")
        assert "`make lab` installs it" in status[name]


def test_doctor_explains_the_nccl_variables_and_warns_about_a_missing_interface(
    fake_machine, capsys, monkeypatch
):
    fake_machine(make_report(network_interfaces=("eth0", "lo")))
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "=ib0")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth0")
    assert cli.main(["doctor"]) == 0  # a warning, not a broken stack
    out = capsys.readouterr().out
    section = out[out.index("NCCL / gloo environment") : out.index("Problems")]
    assert "NCCL_SOCKET_IFNAME==ib0: which IP interfaces NCCL uses" in section
    assert "GLOO_SOCKET_IFNAME=eth0: which interfaces gloo uses" in section
    assert "WARNING: NCCL_SOCKET_IFNAME==ib0 selects none" in out
    assert "GLOO_SOCKET_IFNAME=eth0 names" not in out  # the right one stays quiet


def test_doctor_json_carries_the_communication_settings(fake_machine, capsys, monkeypatch):
    fake_machine(make_report(network_interfaces=("eth0", "lo")))
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    cli.main(["doctor", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert {"setting": "NCCL_DEBUG=WARN"}.items() <= payload["communication"][0].items()
    assert payload["network_interfaces"] == ["eth0", "lo"]


@pytest.mark.parametrize(
    "report, words",
    [
        (cuda_box(driver_cuda_version=None, driver_version=None), "no driver"),
        (cuda_box(driver_cuda_version="12.2"), "driver supports CUDA 12.2"),
        (make_report(packages={**make_report().packages, "transformers": None}), "transformers"),
    ],
    ids=["no-driver", "old-driver", "missing-package"],
)
def test_doctor_exits_1_with_a_fix_when_the_stack_is_broken(fake_machine, capsys, report, words):
    fake_machine(report)
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "ERROR" in out and words in out and "what to do:" in out


@pytest.fixture
def solutions(tmp_path):
    """A solutions folder with one lab that reports the profile its kernel was given."""
    folder = tmp_path / "solutions"
    folder.mkdir()
    cells = ["import os\nfrom llmlab.course import headline",
             "headline(os.environ['LLMLAB_PROFILE'])"]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), folder / "00_env.ipynb")
    return folder


@pytest.mark.parametrize(
    "arguments, words",
    [
        (["--profile", "huge"], "unknown profile 'huge'"),
        (["--only", "99"], "no notebook in"),
        (["--solutions", "no-such-folder"], "no-such-folder: no such folder"),
        (["--only", ""], "--only '': an empty prefix names no lab"),  # "" would start them all
        (["--only", "00", " "], "an empty prefix names no lab"),
        (["--only"], "argument --only: expected at least one argument"),
        (["--out", "README.md"], "--out README.md is a file: give a folder for the executed"),
    ],
    ids=["unknown-profile", "unknown-lab", "missing-solutions", "empty-lab", "blank-lab",
         "only-nothing", "out-is-a-file"],
)
def test_course_rejects_bad_arguments_in_one_line(solutions, capsys, arguments, words,
                                                   monkeypatch):
    monkeypatch.chdir(solutions.parent)
    (solutions.parent / "README.md").write_text("a file, not a folder")
    with pytest.raises(SystemExit) as caught:
        cli.main(["course", "--solutions", str(solutions), "--out", str(solutions), *arguments])
    assert caught.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("llmlab course: error:") and words in error


@pytest.mark.parametrize("folder", ["no-such-folder", "empty"])
def test_make_labs_without_solutions_says_so_and_exits_2(tmp_path, capsys, folder):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as caught:
        cli.main(["make-labs", "--solutions", str(tmp_path / folder),
                  "--labs", str(tmp_path / "labs")])
    assert caught.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("llmlab make-labs: error:") and str(tmp_path / folder) in error
    assert not (tmp_path / "labs").exists()  # nothing written


def test_make_labs_writes_a_lab_per_solution(solutions, tmp_path, capsys):
    labs = tmp_path / "labs"
    assert cli.main(["make-labs", "--solutions", str(solutions), "--labs", str(labs)]) == 0
    assert capsys.readouterr().out == f"wrote {labs / '00_env.ipynb'}\n"


def test_course_leaves_auto_to_each_labs_rule(solutions, capsys, monkeypatch):
    monkeypatch.delenv("LLMLAB_PROFILE", raising=False)
    assert cli.main(["course", "--solutions", str(solutions), "--out", str(solutions)]) == 0
    assert "00_env.ipynb | ok" in capsys.readouterr().out
    executed = nbformat.read(solutions / "00_env.ipynb", as_version=4)
    assert executed.cells[1].outputs[0].text == "Headline: auto\n"
