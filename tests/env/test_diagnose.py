import dataclasses
from pathlib import Path

import pytest
from helpers.fake_machines import ALL_PACKAGES, cuda_box, fake_gpu, h100_box, make_report

from llmlab.env.diagnose import (
    _old_torch_problems,
    diagnose,
    oldest_supported_torch,
)
from llmlab.env.probe import FrameworkInfo
from llmlab.units import GB


def severities(problems) -> list[str]:
    return [problem.severity for problem in problems]


def test_healthy_h100_box_has_no_error_or_warning():
    assert severities(diagnose(h100_box())) == []


def test_cpu_box_gets_only_the_smoke_scale_info():
    (problem,) = diagnose(make_report())
    assert problem.severity == "info"
    assert "No CUDA GPU" in problem.message


def test_cuda_build_with_nvidia_device_but_no_driver_is_an_error():
    (problem,) = diagnose(cuda_box(driver_version=None, driver_cuda_version=None))
    assert problem.severity == "error"
    assert "no driver" in problem.message
    assert "nvidia-smi" in problem.fix


def test_driver_older_than_runtime_is_an_error_naming_both_versions():
    (problem,) = diagnose(cuda_box(driver_cuda_version="12.2"))
    assert problem.severity == "error"
    assert "12.2" in problem.message and "12.8" in problem.message


def test_driver_older_than_runtime_is_only_a_warning_when_the_gpu_still_works():
    problems = diagnose(cuda_box(driver_cuda_version="12.2", gpus=[fake_gpu()]))
    assert severities(problems) == ["warning"]


def test_driver_without_visible_gpu_points_at_cuda_visible_devices():
    (problem,) = diagnose(cuda_box())
    assert problem.severity == "error"
    assert "sees no GPU" in problem.message
    assert "CUDA_VISIBLE_DEVICES" in problem.fix


def test_cuda_wheel_on_gpu_less_laptop_is_a_warning_suggesting_the_cpu_wheel():
    report = cuda_box(nvidia_device_present=False, driver_version=None, driver_cuda_version=None)
    (problem,) = diagnose(report)
    assert problem.severity == "warning"
    assert "without an NVIDIA GPU" in problem.message
    assert "torch==2.13.0 " in problem.fix and "whl/cpu" in problem.fix


def test_cpu_wheel_on_a_gpu_machine_is_a_warning():
    report = make_report(nvidia_device_present=True, driver_cuda_version="12.8")
    assert severities(diagnose(report)) == ["warning"]


def test_missing_required_package_is_an_error_with_the_install_command():
    packages = {**ALL_PACKAGES, "datasets": None, "peft": None}  # peft is optional
    errors = [p for p in diagnose(make_report(packages=packages)) if p.severity == "error"]
    (problem,) = errors
    assert "datasets" in problem.message and "peft" not in problem.message
    assert "make lab" in problem.fix and "constraints.txt" in problem.fix


def test_missing_torch_is_an_error():
    report = make_report(torch_version=None, torch_build="missing", packages={})
    messages = [p.message for p in diagnose(report) if p.severity == "error"]
    assert any("PyTorch" in message for message in messages)


@pytest.mark.parametrize(("installed", "refused"), [
    ("2.9.1+cu126", True), ("2.10.0+cu128", False), ("2.13.0+cpu", False), ("3.0.0", False),
])
def test_a_torch_older_than_the_supported_range_is_an_error(installed, refused):
    problems = _old_torch_problems(make_report(torch_version=installed), oldest="2.10")
    assert bool(problems) is refused
    if refused:
        (problem,) = problems
        assert "2.9.1" in problem.message and "2.10 on" in problem.message
        assert "pip install 'torch>=2.10'" in problem.fix


def test_the_supported_range_is_what_pyproject_states():
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'"torch>={oldest_supported_torch()}"' in pyproject


def test_pascal_gpu_warns_about_missing_tensor_cores():
    report = cuda_box(gpus=[fake_gpu(name="Tesla P40", capability=(6, 1))])
    (problem,) = diagnose(report)
    assert problem.severity == "warning"
    assert "Tesla P40" in problem.message and "tensor cores" in problem.message


def test_framework_blind_to_the_gpus_is_a_warning():
    blind_jax = FrameworkInfo("jax", "0.7.0", False, "0 GPU devices")
    report = dataclasses.replace(h100_box(), frameworks=[blind_jax])
    (problem,) = diagnose(report)
    assert problem.severity == "warning"
    assert "jax" in problem.message and "jax[cuda12]" in problem.fix


@pytest.mark.parametrize(
    ("field", "needed"), [("ram_available_bytes", "4.0 GB"), ("disk_free_bytes", "5.0 GB")]
)
def test_low_memory_or_disk_warns_with_the_amount_needed(field, needed):
    problems = [p for p in diagnose(make_report(**{field: 2 * GB})) if p.severity == "warning"]
    (problem,) = problems
    assert "2.0 GB" in problem.message and needed in problem.message
