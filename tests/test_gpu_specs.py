import pytest

from llmlab.gpu_specs import (
    GPU_SPECS,
    find_gpu_spec,
    gpu_names,
    peak_table,
    peak_tflops,
    resolve_gpu_spec,
)


@pytest.mark.parametrize(
    ("device_name", "spec_name"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ],
)
def test_find_gpu_spec_on_real_device_names(device_name, spec_name):
    spec = find_gpu_spec(device_name)
    assert spec is not None and spec.name == spec_name


@pytest.mark.parametrize(
    "device_name",
    ["NVIDIA B200", "Intel Arc", "NVIDIA H100 NVL", "NVIDIA A10G", "NVIDIA GeForce RTX 3090 Ti"],
)
def test_find_gpu_spec_unknown_hardware(device_name):
    assert find_gpu_spec(device_name) is None


def test_a_gpu_resolves_by_alias_table_name_or_device_name():
    for name in ("h100", " H100 ", "H100 SXM", "NVIDIA H100 80GB HBM3"):
        assert resolve_gpu_spec(name).name == "H100 SXM"
    assert resolve_gpu_spec("a100-40gb").name == "A100 40GB"
    assert resolve_gpu_spec("z80") is None
    assert gpu_names()[:2] == ["h100", "h200"] and "T4" in gpu_names()
    assert "T4" not in gpu_names("bf16")  # no bf16 peak


def test_peak_tflops():
    assert peak_tflops("H100 SXM", "bf16") == 989
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989
    assert peak_tflops(find_gpu_spec("Tesla T4"), "fp16") == 65
    assert peak_tflops("T4", "bf16") is None
    assert peak_tflops("NVIDIA B200", "bf16") is None
    assert peak_tflops(None, "bf16") is None
    with pytest.raises(ValueError, match="fp32"):
        peak_tflops("T4", "fp8")


def test_peak_table_has_a_row_per_spec():
    table = peak_table()
    assert len(table) == len(GPU_SPECS)
    t4 = next(row for row in table if row["name"] == "T4")
    assert t4["capability"] == "7.5"
    assert t4["bf16"] is None and t4["fp16"] == 65
