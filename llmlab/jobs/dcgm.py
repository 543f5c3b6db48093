"""Watching GPUs from beside a job with NVIDIA DCGM: the fields that match the course's readings,
the command that starts NVIDIA's dcgm-exporter container, and a reader for what it serves.

The trainer reads NVML itself, once per step, inside the process that trains
(llmlab.train.metrics: gpu_util, gpu_memory_gb, gpu_power_w). DCGM reads the same counters from
outside, for every GPU of a node whatever runs on it, plus profiling counters NVML does not
give (how busy the SMs and the tensor cores really are, NVLink traffic): it is what cluster
dashboards are built on. dcgm-exporter serves them over HTTP at :9400/metrics in Prometheus'
text format; `parse_metrics` turns that text into {field: {GPU index: value}}.

Field names and units as in DCGM's API reference ("Field Identifiers", "Profiling Metrics")
and dcgm-exporter's counter files (etc/default-counters.csv, etc/dcp-metrics-included.csv).
"""

import ipaddress
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from llmlab.files import write_atomically
from llmlab.units import GB

MIB = 2**20  # DCGM reports framebuffer memory in MiB


@dataclass(frozen=True)
class DcgmField:
    field: str  # DCGM's name, as the exporter's metric name
    reading: str  # the course's name for the reading
    step_metric: str | None  # the StepMetrics field that holds the same reading, if one does
    unit: str  # DCGM's unit
    to_course_unit: float  # DCGM's value times this is in the course's unit (GB, W, %, GB/s)
    kind: str  # Prometheus metric type
    what: str


FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gpu_util", "gpu_util", "%", 1.0, "gauge",
              "percent of the time at least one kernel ran: 100 even if it used one SM"),
    DcgmField("DCGM_FI_DEV_FB_USED", "gpu_memory_gb", "gpu_memory_gb", "MiB", MIB / GB, "gauge",
              "GPU memory in use, every process together"),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "gpu_power_w", "gpu_power_w", "W", 1.0, "gauge",
              "power the GPU draws"),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "gpu_temperature_c", None, "C", 1.0, "gauge",
              "GPU temperature; clocks drop as it nears the slowdown limit"),
    DcgmField("DCGM_FI_PROF_SM_ACTIVE", "sm_active", None, "ratio", 1.0, "gauge",
              "fraction of cycles an SM had work, averaged over all SMs"),
    DcgmField("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor_active", None, "ratio", 1.0, "gauge",
              "fraction of cycles the tensor cores were busy: the hardware's view of MFU"),
    DcgmField("DCGM_FI_PROF_DRAM_ACTIVE", "dram_active", None, "ratio", 1.0, "gauge",
              "fraction of cycles GPU memory was sending or receiving data"),
    DcgmField("DCGM_FI_PROF_NVLINK_TX_BYTES", "nvlink_tx_gb_s", None, "B/s", 1 / GB, "gauge",
              "NVLink bytes sent per second: collectives between GPUs of a node"),
    DcgmField("DCGM_FI_PROF_NVLINK_RX_BYTES", "nvlink_rx_gb_s", None, "B/s", 1 / GB, "gauge",
              "NVLink bytes received per second"),
    DcgmField("DCGM_FI_PROF_PCIE_TX_BYTES", "pcie_tx_gb_s", None, "B/s", 1 / GB, "gauge",
              "PCIe bytes sent per second: host copies, and collectives without NVLink"),
    DcgmField("DCGM_FI_PROF_PCIE_RX_BYTES", "pcie_rx_gb_s", None, "B/s", 1 / GB, "gauge",
              "PCIe bytes received per second"),
)
BY_FIELD = {field.field: field for field in FIELDS}

# `<DCGM version>-<exporter version>-<base image>`; NGC lists newer tags.
EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
EXPORTER_PORT = 9400  # the exporter's default; Prometheus scrapes http://<node>:9400/metrics
COLLECTORS_IN_CONTAINER = "/etc/dcgm-exporter/llmlab-counters.csv"

# DCGM's "no value" sentinels (dcgm_structs.h): integers from 0x7ffffffffffffff0 and doubles
# from 2**47 up by 0-15 mean blank, not found, not supported, no permission ...
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_BLANK = 2.0**47

# One sample: name{label="value",...} value [timestamp]
_SAMPLE = re.compile(
    r"(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+-?\d+)?"
)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def collectors_csv() -> str:
    """dcgm-exporter's counter file for `FIELDS`: one `field, type, help` line each."""
    lines = ["# DCGM FIELD, Prometheus metric type, help message (llmlab.jobs.dcgm)"]
    lines += [f"{f.field}, {f.kind}, {f.what} (in {f.unit})." for f in FIELDS]
    return "\n".join(lines) + "\n"


def write_collectors(path: str | Path) -> Path:
    """Write `collectors_csv()` to `path` for `exporter_command` to mount."""
    path = Path(path)
    write_atomically(path, collectors_csv().encode())
    return path


def exporter_command(
    collectors: str | Path,
    port: int = EXPORTER_PORT,
    image: str = EXPORTER_IMAGE,
    host: str = "127.0.0.1",
) -> list[str]:
    """`docker run` for dcgm-exporter beside a job on this node, collecting `FIELDS` from the
    counter file `collectors` (see `write_collectors`); it then serves Prometheus text at
    http://localhost:<port>/metrics (`curl` it, or point Prometheus at it).

    The port is published on `host`, this node's loopback by default: the exporter has no
    authentication, so on every interface anyone who reaches the node reads its GPU counters.
    For a Prometheus on another machine pass this node's address on a private network (or
    "0.0.0.0" for every interface, behind a firewall)."""
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is not a TCP port: use one between 1024 and 65535")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"host {host!r} is not an IP address: give the address to publish the port on, "
            "127.0.0.1 for this node only (what `hostname -I` prints for another machine)"
        ) from None
    # docker's --publish takes an IPv6 address in brackets (its colons would split the field)
    bind = f"[{address}]" if address.version == 6 else str(address)
    return [
        "docker", "run", "--detach", "--rm", "--name", "dcgm-exporter",
        "--gpus", "all",  # the NVIDIA container toolkit gives it every GPU of the node
        "--cap-add", "SYS_ADMIN",  # DCGM's profiling fields (DCGM_FI_PROF_*) need it
        "--publish", f"{bind}:{port}:{EXPORTER_PORT}",
        "--volume", f"{Path(collectors).resolve()}:{COLLECTORS_IN_CONTAINER}:ro",
        image, "-f", COLLECTORS_IN_CONTAINER,
    ]


def exporter_command_line(
    collectors: str | Path, port: int = EXPORTER_PORT, host: str = "127.0.0.1"
) -> str:
    """`exporter_command` as one line to paste into a shell."""
    return shlex.join(exporter_command(collectors, port, host=host))


def _value(text: str) -> float | None:
    """A sample's value, or None where DCGM says it has none (its blank sentinels)."""
    number = float(text)  # raises ValueError on text that is no number
    if number >= DCGM_INT64_BLANK or DCGM_FP64_BLANK <= number < DCGM_FP64_BLANK + 16:
        return None
    return number


def parse_metrics(text: str) -> dict[str, dict[int, float | None]]:
    """{DCGM field: {GPU index: value}} from the Prometheus text dcgm-exporter serves.

    Comments (# HELP, # TYPE) and metrics without a `gpu` label are skipped, and so are the
    samples of MIG slices (a `GPU_I_ID` label): the values are whole GPUs'. None marks a field
    the GPU cannot report (DCGM's sentinel values, e.g. memory temperature on many boards)."""
    metrics: dict[str, dict[int, float | None]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.fullmatch(line)
        if match is None:
            raise ValueError(f"line {number} is not a Prometheus sample: {line[:80]!r}")
        labels = dict(_LABEL.findall(match["labels"] or ""))
        if "gpu" not in labels or labels.get("GPU_I_ID"):
            continue
        try:
            value = _value(match["value"])
        except ValueError:
            raise ValueError(f"line {number}: {match['value']!r} is not a number") from None
        metrics.setdefault(match["name"], {})[int(labels["gpu"])] = value
    return metrics


def course_readings(metrics: dict[str, dict[int, float | None]]) -> dict[int, dict[str, float]]:
    """{GPU index: {reading: value}} in the course's units (GB, W, %, GB/s), for the fields of
    `FIELDS` that `metrics` (from `parse_metrics`) holds a value for."""
    readings: dict[int, dict[str, float]] = {}
    for name, per_gpu in metrics.items():
        field = BY_FIELD.get(name)
        for gpu, value in per_gpu.items():
            if field is not None and value is not None:
                readings.setdefault(gpu, {})[field.reading] = value * field.to_course_unit
    return dict(sorted(readings.items()))
