import dataclasses
import json
from pathlib import Path

import pytest
import torch
from helpers.fake_machines import ALL_PACKAGES, cuda_box, fake_gpu, h100_box, make_report

from llmlab import env
from llmlab.env import (
    GB,
    CpuInfo,
    FrameworkInfo,
    collect,
    cpu_info,
    diagnose,
    format_report,
    nvidia_smi,
    report_to_dict,
    summarize_topology,
)

NV12_MATRIX = """\
\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV12\tNV12\t0-47\t0\t\tN/A
GPU1\tNV12\t X \tNV12\t0-47\t0\t\tN/A
GPU2\tNV12\tNV12\t X \t0-47\t0\t\tN/A

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""

PCIE_MATRIX = """\
\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\x1b[0m
\x1b[4mGPU0\x1b[0m\t X \tPIX\tPHB\tSYS\tPIX\t0-15\t0
\x1b[4mGPU1\x1b[0m\tPIX\t X \tPHB\tSYS\tPIX\t0-15\t0
\x1b[4mGPU2\x1b[0m\tPHB\tPHB\t X \tSYS\tSYS\t0-15\t0
\x1b[4mGPU3\x1b[0m\tSYS\tSYS\tSYS\t X \tSYS\t16-31\t1
NIC0\tPIX\tPIX\tSYS\tSYS\t X

Legend:
  PIX  = Connection traversing at most a single PCIe bridge
"""


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


def test_memory_figures_are_in_the_courses_gb_and_say_so():
    text = format_report(h100_box())
    assert "GiB" not in text
    assert "85.0 GB" in text  # the H100's 85.0e9 bytes (79.2 GiB)
    assert "RAM total:            16.0 GB (host)" in text


def write_files(folder, files: dict[str, str]):
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


CGROUP_V2 = {"memory.max": "2000000000\n", "memory.current": "900000000\n",
             "memory.stat": "anon 700000000\ninactive_file 100000000\nactive_file 5\n"}  # fmt: skip
CGROUP_V1 = {"memory/memory.limit_in_bytes": "1500000000\n",
             "memory/memory.usage_in_bytes": "600000000\n",
             "memory/memory.stat": "cache 1\ntotal_inactive_file 200000000\n"}  # fmt: skip


@pytest.mark.parametrize(
    ("files", "limit_file", "limit", "used"),
    [(CGROUP_V2, "memory.max", 2 * GB, 0.8 * GB),
     (CGROUP_V1, "memory/memory.limit_in_bytes", 1.5 * GB, 0.4 * GB)],
    ids=["v2", "v1"],
)  # fmt: skip
def test_a_containers_limit_is_read_from_its_cgroup(tmp_path, files, limit_file, limit, used):
    found = env.container_memory_limit(write_files(tmp_path, files))
    # used: usage less the page cache the kernel can drop (inactive_file)
    assert found == env.MemoryLimit(tmp_path / limit_file, int(limit), int(used))


@pytest.mark.parametrize(
    "files",
    [{}, {"memory.max": "max\n", "memory.current": "5\n"},
     {"memory/memory.limit_in_bytes": "garbage"}],
    ids=["no-cgroup", "v2-without-limit", "unreadable"],
)  # fmt: skip
def test_no_container_limit_when_none_is_set(tmp_path, files):
    assert env.container_memory_limit(write_files(tmp_path, files)) is None


def test_the_smaller_of_host_ram_and_container_limit_is_reported():
    limit = env.MemoryLimit(Path("/sys/fs/cgroup/memory.max"), 2 * GB, int(0.8 * GB))
    assert env.usable_ram(64 * GB, 50 * GB, limit) == (
        2 * GB, int(1.2 * GB), "/sys/fs/cgroup/memory.max"
    )  # fmt: skip
    assert env.usable_ram(64 * GB, GB, limit) == (2 * GB, GB, "/sys/fs/cgroup/memory.max")
    unlimited = env.MemoryLimit(Path("memory.limit_in_bytes"), 2**63 - 4096, 0)  # v1's "no limit"
    assert env.usable_ram(64 * GB, 50 * GB, unlimited) == (64 * GB, 50 * GB, None)


def test_doctor_on_binder_reports_the_container_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(env, "CGROUP_ROOT", write_files(tmp_path, CGROUP_V2))
    report = collect(include_frameworks=False)
    assert (report.ram_total_bytes, report.ram_limit_file) == (2 * GB, str(tmp_path / "memory.max"))
    assert report.ram_available_bytes <= 1.2 * GB
    assert f"2.0 GB (container limit, {tmp_path / 'memory.max'})" in format_report(report)
    (warning,) = [p for p in diagnose(report) if "RAM" in p.message]
    assert "container limit" in warning.message


@pytest.mark.parametrize(
    ("capability", "bf16", "tensor_cores"),
    [
        ((6, 1), False, "none"),
        ((7, 5), False, "fp16"),
        ((8, 0), True, "fp16, bf16, tf32, int8"),
        ((8, 9), True, "fp16, bf16, tf32, int8, fp8"),
        ((9, 0), True, "fp16, bf16, tf32, int8, fp8"),
        ((10, 0), True, "fp16, bf16, tf32, int8, fp8, fp4"),
    ],
)
def test_gpu_properties_follow_the_compute_capability(capability, bf16, tensor_cores):
    gpu = fake_gpu(capability=capability)
    assert gpu.bf16 is bf16 and gpu.tf32 is bf16
    assert gpu.tensor_cores == tensor_cores


@pytest.mark.parametrize(
    ("features", "fast"), [(("avx2",), False), (("avx512_bf16",), True), (("asimd", "bf16"), True)]
)
def test_cpu_fast_bf16_needs_bf16_instructions(features, fast):
    assert CpuInfo("cpu", 4, 2, features, None).fast_bf16 is fast


@pytest.mark.parametrize(("cap", "fast"), [("AVX2", False), ("avx512_core", False),
                                           ("AVX512_CORE_BF16", True), ("ALL", True)])  # fmt: skip
def test_oneDNN_capped_below_bf16_makes_bf16_slow(cap, fast):
    # ONEDNN_MAX_CPU_ISA=AVX2 on a CPU with AVX512-BF16: its matmuls emulate bf16, as a laptop's
    assert CpuInfo("cpu", 4, 2, ("avx512_bf16",), "AVX512", cap).fast_bf16 is fast


def test_the_cap_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert cpu_info().onednn_max_isa == "AVX2" and not cpu_info().fast_bf16


@pytest.mark.parametrize(("packed", "text"), [(91002, "9.10.2"), (90100, "9.1.0"), (8902, "8.9.2")])
def test_cudnn_version_unpacking(packed, text):
    assert env._format_cudnn(packed) == text


def test_driver_cuda_version_unpacking():
    assert env._format_cuda_version(12040) == "12.4"


def test_format_report_lists_each_gpu_with_capability_and_memory():
    text = format_report(h100_box())
    for index in range(8):
        assert f"GPU {index}:" in text
    assert text.count("NVIDIA H100 80GB HBM3") == 8
    assert "9.0" in text and "85.0 GB" in text and "NVLink" in text


def test_format_report_says_when_there_is_no_cuda_gpu():
    assert "no CUDA GPU" in format_report(make_report())


def test_report_to_dict_survives_json_with_computed_properties():
    data = json.loads(json.dumps(report_to_dict(h100_box())))
    assert data["gpus"][0]["tensor_cores"].endswith("fp8")
    assert data["gpus"][0]["bf16"] is True
    assert data["cpu"]["fast_bf16"] is False


def test_summarize_topology_all_nvlink():
    assert summarize_topology(NV12_MATRIX) == "NVLink (NV12) between all pairs"


def test_summarize_topology_pcie_only_ignores_nics_and_escape_codes():
    assert summarize_topology(PCIE_MATRIX) == "PCIe only (PHB, PIX, SYS)"


def test_summarize_topology_returns_unparsable_text_as_is():
    assert summarize_topology("no topology here\n") == "no topology here"


def test_nvidia_smi_is_none_without_the_binary(monkeypatch):
    monkeypatch.setenv("PATH", "")
    assert nvidia_smi(["-L"]) is None


@pytest.mark.parametrize(
    ("probe", "sees_gpu", "detail"),
    [
        ("print('1.2.3'); print(2)", True, "2 GPU devices"),
        ("raise SystemExit('no GPU backend here')", None, "no GPU backend here"),
    ],
)
def test_framework_probe_reports_gpus_or_the_error(monkeypatch, probe, sees_gpu, detail):
    monkeypatch.setitem(env.FRAMEWORK_PROBES, "json", probe)  # json: any installed module
    info = env._probe_framework("json")
    assert info.sees_gpu is sees_gpu and detail in info.detail


def test_framework_that_is_not_installed_is_not_probed():
    info = env._probe_framework("surely_not_an_installed_framework")
    assert (info.version, info.sees_gpu, info.detail) == (None, None, "not installed")


def test_collect_on_this_machine_is_sane():
    report = collect()
    assert report.cpu.logical_cores >= 1
    assert report.torch_build in {"cpu", "cuda", "rocm", "missing"}
    assert len(report.gpus) == torch.cuda.device_count()
    assert report.ram_total_bytes >= report.ram_available_bytes > 0
    assert report.packages["torch"] is not None
    assert {framework.name for framework in report.frameworks} == {"tensorflow", "jax"}
    json.dumps(report_to_dict(report))
    assert format_report(report) and isinstance(diagnose(report), list)
