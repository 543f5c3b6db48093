"""Per-step device readings: memory in GB (10^9 bytes, the course's unit), CPU utilisation on a
CPU, and GPU utilisation, memory and power through NVML (faked here: this machine has no GPU);
MFU on a CPU from a measured matmul peak."""

import types

import psutil
import pytest
import torch
from test_train import config
from train_fakes import RandomWindows, tiny_gpt2, token_stream

from llmlab.train import Trainer
from llmlab.train import metrics as metrics_module
from llmlab.train.metrics import DeviceMonitor, measured_peak_flops

GPU_FIELDS = ("gpu_util", "gpu_memory_gb", "gpu_power_w")


def test_a_cpu_run_logs_memory_in_gb_and_cpu_utilisation(tmp_path):
    history = Trainer(tiny_gpt2(), config(max_steps=3, out_dir=tmp_path),
                      RandomWindows(token_stream(), 4)).fit().history  # fmt: skip
    rss = psutil.Process().memory_info().rss
    assert history[-1].memory_gb == pytest.approx(rss / 1e9, rel=0.03)  # not GiB: 7% less
    assert all(0 <= m.cpu_util <= 100 for m in history)
    assert all(getattr(m, name) is None for m in history for name in GPU_FIELDS)
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"memory_gb", "cpu_util", *GPU_FIELDS} <= set(header)


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CUDA device as torch.cuda and NVML would describe it."""

    class NVMLError(Exception):
        pass

    monkeypatch.setattr(metrics_module, "pynvml", types.SimpleNamespace(NVMLError=NVMLError))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 3_000_000_000)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: None)
    monkeypatch.setattr(torch.cuda, "utilization", lambda device: 87)
    monkeypatch.setattr(torch.cuda, "device_memory_used", lambda device: 12_500_000_000)
    monkeypatch.setattr(torch.cuda, "power_draw", lambda device: 250_000)  # milliwatts
    return NVMLError


def test_on_a_gpu_nvml_gives_utilisation_memory_and_power(fake_gpu):
    reading = DeviceMonitor(torch.device("cuda", 0)).read()
    assert reading["memory_gb"] == 3.0  # PyTorch's peak during the step, GB = 10^9 bytes
    assert {name: reading[name] for name in GPU_FIELDS} == {
        "gpu_util": 87.0, "gpu_memory_gb": 12.5, "gpu_power_w": 250.0,
    }  # fmt: skip


def test_without_nvml_or_a_reading_the_gpu_fields_are_none(fake_gpu, monkeypatch):
    def unsupported(device):
        raise fake_gpu("Not Supported")

    monkeypatch.setattr(torch.cuda, "power_draw", unsupported)
    reading = DeviceMonitor(torch.device("cuda", 0)).read()
    assert all(reading[name] is None for name in GPU_FIELDS)
    monkeypatch.setattr(metrics_module, "pynvml", None)  # nvidia-ml-py not installed
    reading = DeviceMonitor(torch.device("cuda", 0)).read()
    assert reading["memory_gb"] == 3.0 and all(reading[name] is None for name in GPU_FIELDS)


def test_measure_peak_shows_the_mfu_of_a_cpu_run():
    peak = measured_peak_flops("cpu")
    assert 1e8 < peak < 1e14  # FLOP/s of a 1024 x 1024 matmul: any CPU lies in this range
    runs = {}
    for measure in (False, True):
        trainer = Trainer(tiny_gpt2(), config(max_steps=2), RandomWindows(token_stream(), 4),
                          flops_per_token=1e3, measure_peak=measure)  # fmt: skip
        runs[measure] = [m.mfu for m in trainer.fit().history]
    assert runs[False] == [None, None]  # a CPU has no datasheet peak
    assert all(0 < mfu < 1 for mfu in runs[True])
