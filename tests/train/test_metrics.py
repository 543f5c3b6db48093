"""Per-step device readings: memory in GB (10^9 bytes, the course's unit), CPU utilisation on a
CPU, and GPU utilisation, memory, power and temperature through NVML (faked here: this machine
has no GPU); MFU on a CPU from a measured matmul peak; every rank's readings side by side; restart
records, and the reader that keeps, at each step, the record of the attempt that went on; a
readable perplexity however large the loss."""

import csv
import dataclasses
import json
import math
import types
from pathlib import Path

import psutil
import pytest
import torch
from helpers.train_fakes import RandomWindows, config, tiny_gpt2, token_stream

from llmlab.train import Trainer
from llmlab.train import metrics as metrics_module
from llmlab.train.metrics import (
    RANK_READINGS,
    DeviceMonitor,
    MetricsWriter,
    StepMetrics,
    flag_stragglers,
    format_perplexity,
    gather_rank_readings,
    measured_peak_flops,
    read_metrics,
)

GPU_FIELDS = ("gpu_util", "gpu_memory_gb", "gpu_power_w", "gpu_temperature_c")


def test_a_cpu_run_logs_memory_in_gb_and_cpu_utilisation(tmp_path):
    history = Trainer(tiny_gpt2(), config(max_steps=3, out_dir=tmp_path),
                      RandomWindows(token_stream(), 4)).fit().history
    rss = psutil.Process().memory_info().rss
    assert history[-1].memory_gb == pytest.approx(rss / 1e9, rel=0.03)  # not GiB: 7% less
    assert all(0 <= m.cpu_util <= 100 for m in history)
    assert all(getattr(m, name) is None for m in history for name in GPU_FIELDS)
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"memory_gb", "cpu_util", *GPU_FIELDS, "ranks", "stragglers"} <= set(header)
    # one process: its batch fetches timed, nothing gathered from other ranks
    assert all(0 < m.data_seconds < m.step_seconds for m in history)
    assert all(m.ranks is None and m.stragglers is None for m in history)


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
    monkeypatch.setattr(torch.cuda, "temperature", lambda device: 64)  # degrees Celsius
    return NVMLError


def test_on_a_gpu_nvml_gives_utilisation_memory_and_power(fake_gpu):
    reading = DeviceMonitor(torch.device("cuda", 0)).read()
    assert reading["memory_gb"] == 3.0  # PyTorch's peak during the step, GB = 10^9 bytes
    assert {name: reading[name] for name in GPU_FIELDS} == {
        "gpu_util": 87.0, "gpu_memory_gb": 12.5, "gpu_power_w": 250.0, "gpu_temperature_c": 64.0,
    }


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
                          flops_per_token=1e3, measure_peak=measure)
        runs[measure] = [m.mfu for m in trainer.fit().history]
    assert runs[False] == [None, None]  # a CPU has no datasheet peak
    assert all(0 < mfu < 1 for mfu in runs[True])


def fake_gather(rows):
    """What gather_rank_values returns on every rank: each rank's numbers, in rank order."""

    def gather(mine):
        assert len(mine) == len(RANK_READINGS)  # one row per rank, the same length everywhere
        return rows

    return gather


def test_every_rank_reading_becomes_one_list_in_rank_order():
    gpu = [4.2, 3.0, 87.0, 12.5, 250.0, 64.0]  # a rank with NVML readings
    no_nvml = [9.9, 3.1, None, None, None, None]  # a rank whose GPU gives none
    own = {name: 0.0 for name in RANK_READINGS}
    ranks = gather_rank_readings(own, fake_gather([gpu, no_nvml, gpu]))
    assert ranks == {
        "data_seconds": [4.2, 9.9, 4.2], "memory_gb": [3.0, 3.1, 3.0],
        "gpu_util": [87.0, None, 87.0], "gpu_memory_gb": [12.5, None, 12.5],
        "gpu_power_w": [250.0, None, 250.0], "gpu_temperature_c": [64.0, None, 64.0],
    }


def test_alone_there_are_no_rank_readings():
    assert gather_rank_readings({name: 1.0 for name in RANK_READINGS}) is None  # no group


def test_a_straggler_must_cost_a_share_of_the_step_not_only_of_the_median():
    # 50 us against 10 us of data time is 5x the median, but 0.04 % of a 0.1 s step: noise
    assert flag_stragglers([10e-6, 50e-6, 10e-6], step_seconds=0.1, threshold=0.2) == []
    assert flag_stragglers([0.001, 0.3, 0.001], step_seconds=0.35, threshold=0.2) == [1]
    assert flag_stragglers([0.3, 0.001, 0.3, 0.001, 0.001], 0.35, 0.2) == [0, 2]


def test_the_step_without_the_straggler_is_what_it_is_compared_with():
    # rank 1 arrives 0.2 s after the median in a 1.2 s step: without it the step took 1.0 s, so
    # it made the step 20 % longer; on that boundary it is not flagged, just past it it is
    assert flag_stragglers([0.0, 0.2, 0.0], step_seconds=1.2, threshold=0.2) == []
    assert flag_stragglers([0.0, 0.2001, 0.0], step_seconds=1.2001, threshold=0.2) == [1]
    assert flag_stragglers([0.0, 0.2, 0.0], step_seconds=1.2, threshold=0.19) == [1]


def _metrics(step: int) -> StepMetrics:
    return StepMetrics(step=step, loss=1.0, lr=0.1, grad_norm=None, tokens_per_s=1.0,
                       tokens_seen=step, step_seconds=0.1, mfu=None, memory_gb=0.1, cpu_util=1.0,
                       gpu_util=None, gpu_memory_gb=None, gpu_power_w=None,
                       data_seconds=0.0)


def test_a_metrics_csv_with_other_columns_is_kept_whole_and_a_new_one_started(tmp_path, capsys):
    old = "step,loss\n1,2.5\n"
    (tmp_path / "metrics.csv").write_text(old)
    writer = MetricsWriter(tmp_path)
    writer.write(_metrics(2))
    writer.close()
    assert (tmp_path / "metrics.before-1.csv").read_text() == old
    with open(tmp_path / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [row["step"] for row in rows] == ["2"] and "data_seconds" in rows[0]
    assert "kept as metrics.before-1.csv" in capsys.readouterr().out


def test_a_metrics_csv_with_the_same_columns_is_appended_to(tmp_path):
    for step in (1, 2):  # a resumed run opens the writer again
        writer = MetricsWriter(tmp_path)
        writer.write(_metrics(step))
        writer.close()
    with open(tmp_path / "metrics.csv", newline="") as file:
        assert [row["step"] for row in csv.DictReader(file)] == ["1", "2"]
    assert not list(tmp_path.glob("metrics.before-*"))


def _attempt(out_dir, steps, restart_after: int | None = None) -> None:
    """One attempt's records, as a run writes them: a restart record first when it appends."""
    writer = MetricsWriter(out_dir)
    assert writer.continues_history == (restart_after is not None)
    if restart_after is not None:
        checkpoint = Path(f"step_{restart_after:07d}") if restart_after else None
        writer.write_restart(restart_after, checkpoint)
    for step in steps:
        writer.write(dataclasses.replace(_metrics(step), loss=float(10 * len(steps) + step)))
    writer.close()


def test_read_metrics_keeps_for_each_step_the_record_of_the_attempt_that_went_on(tmp_path):
    _attempt(tmp_path, range(1, 7))  # killed after step 6; its newest checkpoint is step 4
    _attempt(tmp_path, range(5, 9), restart_after=4)
    first, second = [(s, 60.0 + s) for s in range(1, 5)], [(s, 40.0 + s) for s in range(5, 9)]
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path)] == first + second
    _attempt(tmp_path, [1, 2], restart_after=0)  # started again from step 1 (fresh=True)
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path)] == [(1, 21.0), (2, 22.0)]
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
    assert len(lines) == 6 + 1 + 4 + 1 + 2  # every record stays in the file
    assert lines[6]["event"] == "restart" and lines[6]["checkpoint"] == "step_0000004"
    with open(tmp_path / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(row["step"], row["event"]) for row in rows if row["event"]] == [
        ("4", "restart"), ("0", "restart")]
    assert len(rows) == len(lines)


def test_read_metrics_names_the_file_and_line_of_a_damaged_record(tmp_path):
    _attempt(tmp_path, [1])
    with open(tmp_path / "metrics.jsonl", "a") as file:
        file.write('{"step": 2, "lo\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl line 2 is not a JSON record"):
        read_metrics(tmp_path)


def test_perplexity_is_readable_however_large_the_loss():
    assert format_perplexity(math.exp(3.0)) == "20.1"  # as before below a million
    assert format_perplexity(math.exp(13.8)) == "984609.1"
    assert format_perplexity(math.exp(504.0)) == "7.66e+218"  # not 219 digits
    assert format_perplexity(math.inf) == "inf"  # a loss too large for a float (perplexity_of)
