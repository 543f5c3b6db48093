import pytest
import torch

from llmlab.device import training_dtype_for
from llmlab.gpu_specs import DTYPES, peak_tflops
from llmlab.matmul import emulated, matmul_flops, matmul_sweep, measure_matmul, mfu

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


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


@pytest.mark.parametrize("fast_bf16", [True, False])
def test_a_sweep_times_emulated_bf16_only_up_to_its_limit(monkeypatch, fast_bf16):
    """On a CPU without bf16 instructions (injected: the dtype rule says fp32) bf16 is emulated,
    about 100x slower: the sweep stops it at `emulated_up_to`; fp32, and bf16 where it is native,
    run every size. Sizes stand in for 512 and 1024 with a lower limit."""
    choice = training_dtype_for("cpu", cpu_fast_bf16=fast_bf16)
    monkeypatch.setattr("llmlab.matmul.choose_dtype", lambda device: choice)
    assert emulated("bf16", "cpu") is not fast_bf16 and not emulated("fp32", "cpu")
    results = matmul_sweep((16, 32), ["fp32", "bf16"], "cpu", warmup=0, repeats=1,
                           progress=False, emulated_up_to=16)
    expected = [(16, "fp32"), (16, "bf16"), (32, "fp32")] + ([(32, "bf16")] if fast_bf16 else [])
    assert [(r.size, r.dtype) for r in results] == expected
    every = matmul_sweep((16, 32), ["bf16"], "cpu", warmup=0, repeats=1, progress=False,
                         emulated_up_to=None)
    assert [r.size for r in every] == [16, 32]


def test_mfu():
    assert mfu(1000, 6e9, 1e13) == pytest.approx(0.6)
    assert mfu(1000, 6e9, None) is None
    for bad in [(-1, 6e9, 1e13), (1000, -1, 1e13), (1000, 6e9, 0)]:
        with pytest.raises(ValueError):
            mfu(*bad)


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
