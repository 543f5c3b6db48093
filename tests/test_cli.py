"""`llmlab doctor`: a true report here, JSON for bug reports, exit 1 on a broken stack."""

import json
import subprocess
import sys

import pytest
from fake_machines import cuda_box, h100_box, make_report

from llmlab import cli, env


def test_doctor_runs_as_a_module_and_reports_this_machine():
    result = subprocess.run(
        [sys.executable, "-m", "llmlab", "doctor"], capture_output=True, text=True, timeout=120
    )
    report = env.collect(include_frameworks=False)
    broken = any(p.severity == "error" for p in env.diagnose(report))
    assert result.returncode == (1 if broken else 0), result.stderr
    assert "== PyTorch ==" in result.stdout and "Labs on this machine" in result.stdout
    expected = "full" if report.gpus else "smoke"
    assert f"Recommended profile: {expected}" in result.stdout


@pytest.fixture
def fake_machine(monkeypatch):
    """Make the doctor see a machine of the test's choosing."""

    def use(report):
        monkeypatch.setattr(env, "collect", lambda include_frameworks=True: report)

    return use


def test_doctor_json_is_parseable_and_complete(fake_machine, capsys):
    fake_machine(h100_box())
    assert cli.main(["doctor", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert len(payload["gpus"]) == 8 and payload["gpus"][0]["bf16"] is True
    assert payload["recommended_profile"] == "full"
    assert {lab["scale"] for lab in payload["labs"]} == {"full"}


def test_doctor_on_a_cpu_machine_says_so_and_recommends_smoke(fake_machine, capsys):
    fake_machine(make_report())
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "No CUDA GPU" in out and "Recommended profile: smoke" in out


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
