import pytest
import torch

from llmlab import bench
from llmlab.bench import (
    DTYPES,
    GPU_SPECS,
    Timing,
    find_gpu_spec,
    markdown_table,
    matmul_flops,
    matmul_sweep,
    measure_matmul,
    mfu,
    peak_table,
    peak_tflops,
    speedups,
    time_fn,
    time_rounds,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_time_fn_counts_calls_and_orders_its_statistics():
    calls = []
    timing = time_fn(lambda: calls.append(1), warmup=3, repeats=4)
    assert len(calls) == 3 + 4
    assert len(timing.times_s) == 4
    assert timing.warmup == 3
    assert timing.min_s <= timing.median_s <= timing.max_s


@pytest.mark.parametrize(("warmup", "repeats"), [(0, 0), (-1, 3)])
def test_time_fn_rejects_bad_arguments(warmup, repeats):
    with pytest.raises(ValueError):
        time_fn(lambda: None, warmup=warmup, repeats=repeats)


def test_time_rounds_takes_the_functions_in_turn_within_each_round():
    calls = []
    timings = time_rounds({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                          rounds=3, warmup=1, repeats=2)  # fmt: skip
    assert calls == (["a"] * 3 + ["b"] * 3) * 3  # a whole round of a, then of b, three times
    assert [len(timings[name]) for name in "ab"] == [3, 3]
    with pytest.raises(ValueError, match="rounds >= 1"):
        time_rounds({"a": lambda: None}, rounds=0)


def timing(median_s: float) -> Timing:
    return Timing(median_s, median_s, median_s, (median_s,), 0)


def test_speedups_pair_the_rounds():
    slow, fast = [timing(0.3), timing(0.4)], [timing(0.2), timing(0.1)]
    assert speedups(slow, fast) == pytest.approx((1.5, 4.0))
    assert speedups(slow, slow) == (1.0, 1.0)
    with pytest.raises(ValueError, match="same rounds"):
        speedups(slow, fast[:1])


def test_matmul_flops():
    assert matmul_flops(2, 3, 4) == 48


def test_measure_matmul_on_cpu():
    result = measure_matmul(128, "fp32", "cpu", warmup=1, repeats=2)
    assert (result.size, result.dtype, result.device) == (128, "fp32", "cpu")
    assert result.tflops > 0
    assert result.tflops == pytest.approx(2 * 128**3 / result.seconds / 1e12)


def test_tf32_on_cpu_raises():
    with pytest.raises(ValueError, match="tf32"):
        measure_matmul(16, "tf32", "cpu")


def test_unknown_dtype_raises():
    with pytest.raises(ValueError, match="fp32"):
        measure_matmul(16, "int8", "cpu")


def test_matmul_sweep_skips_tf32_on_cpu():
    sizes = (16, 32)
    results = matmul_sweep(sizes, DTYPES, "cpu", warmup=0, repeats=1, progress=False)
    assert len(results) == len(sizes) * 3
    assert [r.dtype for r in results[:3]] == ["fp32", "bf16", "fp16"]
    assert [r.size for r in results] == [16, 16, 16, 32, 32, 32]


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
        assert bench.resolve_gpu_spec(name).name == "H100 SXM"
    assert bench.resolve_gpu_spec("a100-40gb").name == "A100 40GB"
    assert bench.resolve_gpu_spec("z80") is None
    assert bench.gpu_names()[:2] == ["h100", "h200"] and "T4" in bench.gpu_names()
    assert "T4" not in bench.gpu_names("bf16")  # no bf16 peak


def test_peak_tflops():
    assert peak_tflops("H100 SXM", "bf16") == 989
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989
    assert peak_tflops(find_gpu_spec("Tesla T4"), "fp16") == 65
    assert peak_tflops("T4", "bf16") is None
    assert peak_tflops("NVIDIA B200", "bf16") is None
    assert peak_tflops(None, "bf16") is None
    with pytest.raises(ValueError, match="fp32"):
        peak_tflops("T4", "fp8")


def test_mfu():
    assert mfu(1000, 6e9, 1e13) == pytest.approx(0.6)
    assert mfu(1000, 6e9, None) is None
    for bad in [(-1, 6e9, 1e13), (1000, -1, 1e13), (1000, 6e9, 0)]:
        with pytest.raises(ValueError):
            mfu(*bad)


def test_peak_table_has_a_row_per_spec():
    table = peak_table()
    assert len(table) == len(GPU_SPECS)
    t4 = next(row for row in table if row["name"] == "T4")
    assert t4["capability"] == "7.5"
    assert t4["bf16"] is None and t4["fp16"] == 65


@needs_cuda
@pytest.mark.parametrize("dtype", ["bf16", "tf32"])
def test_measure_matmul_on_the_gpu(dtype):
    if dtype == "tf32" and torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("tf32 needs an Ampere or newer GPU")
    result = measure_matmul(1024, dtype, "cuda", warmup=2, repeats=3)
    assert result.tflops > 0
    peak = peak_tflops(torch.cuda.get_device_name(), dtype)
    if peak is not None:
        assert result.tflops < 2 * peak  # faster than the datasheet would mean broken timing


def test_busy_warning_only_when_the_load_exceeds_the_cores():
    assert bench.busy_warning(load=1.5, cores=2) is None
    assert bench.busy_warning(load=2.0, cores=2) is None
    warning = bench.busy_warning(load=3.2, cores=2)
    assert "busy" in warning and "3.2" in warning and "2 cores" in warning


def test_markdown_table_keeps_column_order_and_values():
    rows = [{"mode": "sync", "stall s": 0.4}, {"mode": "async", "stall s": 0.03}]
    assert markdown_table(rows) == "mode | stall s\n--- | ---\nsync | 0.4\nasync | 0.03"


def test_aligned_markdown_table_pads_columns_and_puts_numbers_right():
    rows = [{"lab": "01_data.ipynb", "wall time": "12.3 s", "peak MB": "-", "why": "fits"},
            {"lab": "02", "wall time": "7.0 s", "peak MB": "1,024", "why": ""}]  # fmt: skip
    assert markdown_table(rows, aligned=True).splitlines() == [
        "lab           | wall time | peak MB | why",
        "------------- | --------: | ------: | ----",
        "01_data.ipynb |    12.3 s |       - | fits",
        "02            |     7.0 s |   1,024 |",
    ]


def test_aligned_markdown_table_keeps_a_column_of_words_left():
    rows = [{"fit": "yes", "n": 1}, {"fit": "2 tight", "n": 22}]
    assert markdown_table(rows, aligned=True).splitlines() == [
        "fit     |   n", "------- | --:", "yes     |   1", "2 tight |  22"]  # fmt: skip
