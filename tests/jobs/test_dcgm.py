"""DCGM beside a job: the field table matches the trainer's readings, the exporter command mounts
the counter file it collects, and the Prometheus text it serves is read per GPU (no network)."""

import dataclasses
import math
import shlex

import pytest

from llmlab.jobs import dcgm
from llmlab.train.metrics import StepMetrics

# What `curl localhost:9400/metrics` prints, trimmed to two GPUs: labels in the exporter's style
# (a model name with spaces, a hostname), DCGM's "not supported" sentinel for GPU 1's memory
# temperature, a MIG slice, a sample with a timestamp, and another exporter's metric.
METRICS = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1a2b",device="nvidia0",modelName="NVIDIA H100 80GB HBM3"} 97
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-3c4d",Hostname="node-1",pci_bus_id="00000000:2A:00.0"} 12
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1a2b",modelName="NVIDIA H100 80GB HBM3"} 61035
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-3c4d",modelName="NVIDIA H100 80GB HBM3"} 1024 1763900000000
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-1a2b"} 612.375
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-3c4d"} 118.5
DCGM_FI_DEV_MEMORY_TEMP{gpu="0",UUID="GPU-1a2b"} 58
DCGM_FI_DEV_MEMORY_TEMP{gpu="1",UUID="GPU-3c4d"} 9223372036854775794
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-1a2b"} 0.412
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="1",UUID="GPU-3c4d",GPU_I_ID="",GPU_I_PROFILE=""} 0.02
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="1",UUID="GPU-3c4d",GPU_I_ID="2",GPU_I_PROFILE="3g.40gb"} 0.5
DCGM_FI_PROF_NVLINK_TX_BYTES{gpu="0",UUID="GPU-1a2b"} 1.25e+11
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-1a2b"} 140737488355330
go_goroutines 12
"""


def test_each_reading_the_trainer_logs_names_a_stepmetrics_field():
    step_fields = {field.name for field in dataclasses.fields(StepMetrics)}
    linked = {field.step_metric for field in dcgm.FIELDS} - {None}
    assert linked == {"gpu_util", "gpu_memory_gb", "gpu_power_w"} and linked <= step_fields
    for field in dcgm.FIELDS:
        assert field.field.startswith(("DCGM_FI_DEV_", "DCGM_FI_PROF_"))
        assert field.step_metric in (None, field.reading)  # one name for one reading
    assert len(dcgm.BY_FIELD) == len(dcgm.FIELDS)


def test_parse_metrics_gives_each_field_per_gpu():
    metrics = dcgm.parse_metrics(METRICS)
    assert metrics["DCGM_FI_DEV_GPU_UTIL"] == {0: 97.0, 1: 12.0}
    assert metrics["DCGM_FI_DEV_FB_USED"] == {0: 61035.0, 1: 1024.0}  # the timestamp is not it
    assert metrics["DCGM_FI_DEV_POWER_USAGE"] == {0: 612.375, 1: 118.5}
    assert metrics["DCGM_FI_DEV_MEMORY_TEMP"] == {0: 58.0, 1: None}  # DCGM: not supported
    assert metrics["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == {0: 0.412, 1: 0.02}  # not the MIG slice
    assert metrics["DCGM_FI_PROF_NVLINK_TX_BYTES"] == {0: 1.25e11}
    assert metrics["DCGM_FI_PROF_SM_ACTIVE"] == {0: None}  # 2**47 + 2: DCGM's double blank
    assert "go_goroutines" not in metrics  # no gpu label: not a GPU's reading


def test_course_readings_are_in_the_course_units():
    readings = dcgm.course_readings(dcgm.parse_metrics(METRICS))
    assert list(readings) == [0, 1]
    gpu0 = readings[0]
    assert gpu0["gpu_util"] == 97.0 and gpu0["gpu_power_w"] == 612.375
    assert math.isclose(gpu0["gpu_memory_gb"], 61035 * 2**20 / 1e9)  # MiB -> GB (10^9 bytes)
    assert math.isclose(gpu0["nvlink_tx_gb_s"], 125.0)
    assert gpu0["tensor_active"] == 0.412
    assert "sm_active" not in gpu0  # no value, no reading
    assert "gpu_temperature_c" not in readings[1]  # only the memory temperature was served


@pytest.mark.parametrize(
    "text, words",
    [
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"}', "line 1 is not a Prometheus sample"),
        ('# HELP x\nDCGM_FI_DEV_GPU_UTIL{gpu="0"} high', "line 2: 'high' is not a number"),
    ],
)
def test_text_that_is_not_prometheus_is_refused_with_the_line(text, words):
    with pytest.raises(ValueError, match=words):
        dcgm.parse_metrics(text)


def test_the_counter_file_lists_every_field_in_the_exporters_format(tmp_path):
    path = dcgm.write_collectors(tmp_path / "counters.csv")
    rows = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert [row.split(",")[0] for row in rows] == [field.field for field in dcgm.FIELDS]
    assert all(row.split(",")[1].strip() == "gauge" for row in rows)  # field, type, help


def test_the_exporter_command_runs_the_container_with_that_file(tmp_path):
    counters = tmp_path / "counters.csv"
    command = dcgm.exporter_command(counters, port=9500)
    assert command[:2] == ["docker", "run"]
    assert command[command.index("--gpus") + 1] == "all"
    # on this node's loopback only: the exporter has no authentication
    assert command[command.index("--publish") + 1] == "127.0.0.1:9500:9400"
    mount = command[command.index("--volume") + 1]
    assert mount == f"{counters.resolve()}:{dcgm.COLLECTORS_IN_CONTAINER}:ro"
    image = command.index(dcgm.EXPORTER_IMAGE)
    assert command[image + 1 :] == ["-f", dcgm.COLLECTORS_IN_CONTAINER]
    assert "SYS_ADMIN" in command  # the profiling fields need it
    line = dcgm.exporter_command_line(counters)
    assert line.startswith("docker run ") and " 127.0.0.1:9400:9400 " in line
    with pytest.raises(ValueError, match="not a TCP port"):
        dcgm.exporter_command(counters, port=0)


@pytest.mark.parametrize(
    ("host", "published"), [("0.0.0.0", "0.0.0.0:9400:9400"), ("::1", "[::1]:9400:9400")]
)
def test_the_exporter_is_published_wider_only_when_asked(tmp_path, host, published):
    command = dcgm.exporter_command(tmp_path / "counters.csv", host=host)
    assert command[command.index("--publish") + 1] == published
    assert shlex.split(dcgm.exporter_command_line(tmp_path / "counters.csv", host=host)) == command
    with pytest.raises(ValueError, match="'node-1' is not an IP address"):
        dcgm.exporter_command(tmp_path / "counters.csv", host="node-1")
