import json
from pathlib import Path

import pytest
import torch
from helpers.fake_machines import fake_gpu

from llmlab.env import probe
from llmlab.env.diagnose import diagnose
from llmlab.env.probe import CpuInfo, collect, cpu_info, nvidia_smi
from llmlab.env.report import format_report, report_to_dict
from llmlab.units import GB


def write_files(folder, files: dict[str, str]):
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


CGROUP_V2 = {"memory.max": "2000000000\n", "memory.current": "900000000\n",
             "memory.stat": "anon 700000000\ninactive_file 100000000\nactive_file 5\n"}


CGROUP_V1 = {"memory/memory.limit_in_bytes": "1500000000\n",
             "memory/memory.usage_in_bytes": "600000000\n",
             "memory/memory.stat": "cache 1\ntotal_inactive_file 200000000\n"}


@pytest.mark.parametrize(
    ("files", "limit_file", "limit", "used"),
    [(CGROUP_V2, "memory.max", 2 * GB, 0.8 * GB),
     (CGROUP_V1, "memory/memory.limit_in_bytes", 1.5 * GB, 0.4 * GB)],
    ids=["v2", "v1"],
)
def test_a_containers_limit_is_read_from_its_cgroup(tmp_path, files, limit_file, limit, used):
    found = probe.container_memory_limit(write_files(tmp_path, files))
    # used: usage less the page cache the kernel can drop (inactive_file)
    assert found == probe.MemoryLimit(tmp_path / limit_file, int(limit), int(used))


@pytest.mark.parametrize(
    "files",
    [{}, {"memory.max": "max\n", "memory.current": "5\n"},
     {"memory/memory.limit_in_bytes": "garbage"}],
    ids=["no-cgroup", "v2-without-limit", "unreadable"],
)
def test_no_container_limit_when_none_is_set(tmp_path, files):
    assert probe.container_memory_limit(write_files(tmp_path, files)) is None


def test_the_smaller_of_host_ram_and_container_limit_is_reported():
    limit = probe.MemoryLimit(Path("/sys/fs/cgroup/memory.max"), 2 * GB, int(0.8 * GB))
    assert probe.usable_ram(64 * GB, 50 * GB, limit) == (
        2 * GB, int(1.2 * GB), "/sys/fs/cgroup/memory.max"
    )
    assert probe.usable_ram(64 * GB, GB, limit) == (2 * GB, GB, "/sys/fs/cgroup/memory.max")
    unlimited = probe.MemoryLimit(Path("memory.limit_in_bytes"), 2**63 - 4096, 0)  # v1's "no limit"
    assert probe.usable_ram(64 * GB, 50 * GB, unlimited) == (64 * GB, 50 * GB, None)


def test_doctor_on_binder_reports_the_container_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(probe, "CGROUP_ROOT", write_files(tmp_path, CGROUP_V2))
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
                                           ("AVX512_CORE_BF16", True), ("ALL", True)])
def test_oneDNN_capped_below_bf16_makes_bf16_slow(cap, fast):
    # ONEDNN_MAX_CPU_ISA=AVX2 on a CPU with AVX512-BF16: its matmuls emulate bf16, as a laptop's
    assert CpuInfo("cpu", 4, 2, ("avx512_bf16",), "AVX512", cap).fast_bf16 is fast


def test_the_cap_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert cpu_info().onednn_max_isa == "AVX2" and not cpu_info().fast_bf16


@pytest.mark.parametrize(("packed", "text"), [(91002, "9.10.2"), (90100, "9.1.0"), (8902, "8.9.2")])
def test_cudnn_version_unpacking(packed, text):
    assert probe._format_cudnn(packed) == text


def test_driver_cuda_version_unpacking():
    assert probe._format_cuda_version(12040) == "12.4"


def test_nvidia_smi_is_none_without_the_binary(monkeypatch):
    monkeypatch.setenv("PATH", "")
    assert nvidia_smi(["-L"]) is None


@pytest.mark.parametrize(
    ("script", "sees_gpu", "detail"),
    [
        ("print('1.2.3'); print(2)", True, "2 GPU devices"),
        ("raise SystemExit('no GPU backend here')", None, "no GPU backend here"),
    ],
)
def test_framework_probe_reports_gpus_or_the_error(monkeypatch, script, sees_gpu, detail):
    monkeypatch.setitem(probe.FRAMEWORK_PROBES, "json", script)  # json: any installed module
    info = probe._probe_framework("json")
    assert info.sees_gpu is sees_gpu and detail in info.detail


def test_framework_that_is_not_installed_is_not_probed():
    info = probe._probe_framework("surely_not_an_installed_framework")
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
