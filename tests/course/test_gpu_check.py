"""`llmlab gpu-check`: a dry run without a GPU, failures recorded section by section, the
budgets kept on an injected clock, and skips that name what is missing."""

import json
import math
import sys

import pytest
import torch
from helpers.fake_clock import ManualClock

from llmlab import cli
from llmlab.course import gpu_check
from llmlab.course.gpu_check import SECTIONS, Budget, Section, Skip, row, run_sections


def _section(name: str, run, budget_s: float = 60.0, packages=()) -> Section:
    return Section(name, "Lab 99", f"what {name} measures", run, budget_s, packages)


def _never_run(budget: Budget) -> list[dict]:
    raise AssertionError("a section ran in a dry run")


def test_without_cuda_the_command_lists_every_section_exits_0_and_writes_every_skip(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "report" / "gpu_check.json"
    assert cli.main(["gpu-check", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "no CUDA GPU: nothing measured" in printed
    for section in SECTIONS:
        assert f"{section.name} ({section.lab}): {section.measures}" in printed
    report = json.loads(out.read_text())
    assert report["dry_run"] is True and report["device"] is None
    assert report["torch"] == torch.__version__ and report["budget_s"] == 480
    assert report["model"] == "gpt2-124m"
    assert [s["section"] for s in report["sections"]] == [s.name for s in SECTIONS]
    for section in report["sections"]:
        assert section["status"] == "skipped" and section["rows"] == []
        assert section["reason"].startswith("no CUDA GPU: nothing measured")
        assert section["measures"] and section["lab"]


def test_the_dry_run_measures_nothing_even_with_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H100 80GB HBM3")
    out = tmp_path / "gpu_check.json"
    assert gpu_check.gpu_check(out, dry_run=True, sections=[_section("a", _never_run)]) == 0
    report = json.loads(out.read_text())
    assert report["device"] == "NVIDIA H100 80GB HBM3"
    assert report["sections"][0]["reason"] == "dry run: nothing measured"


def test_the_dry_run_names_the_packages_a_section_would_miss(monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # None in sys.modules: not importable
    section = _section("quant", _never_run, packages=("bitsandbytes", "json"))
    (result,) = run_sections([section], skip_all="no CUDA GPU")
    assert result["reason"] == "no CUDA GPU (missing here too: bitsandbytes)"


def test_a_failing_section_is_recorded_and_the_others_still_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H100 80GB HBM3")
    ran = []

    def works(name):
        def run(budget):
            ran.append(name)
            return [row(f"{name} figure", 1.5, "TFLOP/s", "a note")]

        return run

    def breaks(budget):
        raise RuntimeError("CUDA error: an illegal memory access")

    def skips(budget):
        raise Skip("needs two GPUs")

    sections = [_section("first", works("first")), _section("broken", breaks),
                _section("two-gpu", skips), _section("last", works("last"))]
    out = tmp_path / "gpu_check.json"
    assert gpu_check.gpu_check(out, sections=sections) == 1  # an error makes the exit status 1
    assert ran == ["first", "last"]
    report = json.loads(out.read_text())
    status = {s["section"]: (s["status"], s["reason"]) for s in report["sections"]}
    assert status == {
        "first": ("ok", ""),
        "broken": ("error", "RuntimeError: CUDA error: an illegal memory access"),
        "two-gpu": ("skipped", "needs two GPUs"),
        "last": ("ok", ""),
    }
    assert report["sections"][3]["rows"] == [
        {"what": "last figure", "value": 1.5, "unit": "TFLOP/s", "note": "a note"}
    ]
    printed = capsys.readouterr().out.splitlines()
    rows = [[cell.strip() for cell in line.split("|")] for line in printed]
    assert ["broken", "Lab 99", "error"] in [row[:3] for row in rows]
    assert ["last figure", "1.5", "TFLOP/s", "a note"] in rows


def test_each_section_gets_its_budget_and_the_overall_budget_stops_the_rest():
    clock = ManualClock()
    seen = {}

    def takes(name, seconds):
        def run(budget):
            seen[name] = budget.left()
            clock.sleep(seconds)
            return []

        return run

    sections = [_section("slow", takes("slow", 70), budget_s=60),
                _section("cut", takes("cut", 40), budget_s=60),
                _section("late", takes("late", 1), budget_s=60)]
    results = run_sections(sections, budget_s=100, clock=clock)
    assert seen == {"slow": 60, "cut": 30}  # "cut" gets what is left of the 100 s, not its 60
    assert [(r["status"], r["reason"], r["seconds"]) for r in results] == [
        ("ok", "over its 60 s budget", 70),
        ("ok", "", 40),
        ("skipped", "overall budget of 100 s spent", 0),
    ]


def test_a_section_stops_measuring_when_its_budget_is_spent(monkeypatch):
    monkeypatch.setattr(gpu_check, "require_cuda", lambda *args: torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "cpu")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (0, 0))
    rows = gpu_check.check_matmul(Budget(deadline=0.0, clock=lambda: 1.0))
    assert [r["note"] for r in rows[:-1]] == ["section budget spent"] * 4
    assert rows[-1]["note"].startswith("fp8 needs compute capability 8.9")


def test_a_missing_package_is_a_skip_that_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    monkeypatch.setitem(sys.modules, "torchao", None)
    with pytest.raises(Skip, match="bitsandbytes is not installed"):
        gpu_check.require_package("bitsandbytes")
    monkeypatch.setattr(gpu_check, "require_cuda", lambda *args: torch.device("cpu"))
    notes = {r["what"]: r["note"] for r in gpu_check.check_quant(Budget(math.inf))}
    assert notes["bitsandbytes NF4 gpt2-124m"].startswith("skipped: bitsandbytes is not")
    assert notes["torchao int8 weight-only gpt2-124m"].startswith("skipped: torchao is not")


def test_no_gpu_and_an_old_gpu_are_skips_with_the_reason(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(Skip, match="no CUDA GPU"):
        gpu_check.require_cuda()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (7, 5))
    with pytest.raises(Skip, match="bf16 training needs compute capability 8.0, this GPU has 7.5"):
        gpu_check.require_cuda((8, 0), "bf16 training")


def test_out_must_be_a_file_not_a_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["gpu-check", "--out", str(tmp_path)])
    assert stop.value.code == 2
    assert f"--out {tmp_path} is a folder" in capsys.readouterr().err


def test_the_gpu_sections_run_on_the_cpu_at_a_tiny_scale(monkeypatch):
    """Their code paths (the trainer, the memory plan, the checkpoint stall) on the CPU, so a
    wrong call is found here and not in the GPU's short time."""
    monkeypatch.setattr(gpu_check, "require_cuda", lambda *args: torch.device("cpu"))
    for name, value in {"MODEL": "tiny", "SEQ": 16, "TRAIN_BATCH": 2, "MEMORY_BATCH": 2,
                        "TRAIN_STEPS": 4, "FP16_STEPS": 2}.items():
        monkeypatch.setattr(gpu_check, name, value)
    memory = gpu_check.check_memory(Budget(math.inf))
    assert len(memory) == 6 and all(r["unit"] == "GB peak (tracked tensors)" for r in memory)
    assert all("off by +0.0%" in r["note"] for r in memory)  # the plan is exact off a GPU
    training = gpu_check.check_training(Budget(math.inf), compile=False)
    assert [r["what"] for r in training] == [
        "bf16 + SDPA", "fp16 + GradScaler, final loss",
        "checkpoint written on the GPU, loaded on the CPU",
    ]
    assert training[0]["value"] > 0 and training[2]["value"] == 2  # resumed at the last step
    stall = gpu_check._stall_rows(torch.device("cpu"))
    assert [r["what"].split(",")[1] for r in stall] == [" sync", " async"]
    assert all("exact: True" in r["note"] for r in stall)
