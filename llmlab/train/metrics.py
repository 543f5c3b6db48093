"""Per-step training metrics, written as JSON lines and CSV as they come, and read back.

A run that appends to the records of an earlier attempt in its folder (restarted after a kill,
resumed from a checkpoint, or started again with fresh=True) first writes a restart record:
{"event": "restart", "step": N, ...}, the step it goes on after (0: from the start). The records
of later steps above it were cut short with their attempt: `read_metrics` leaves them out.
"""

import csv
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

import psutil
import torch

from llmlab.distributed.stragglers import find_stragglers, gather_rank_values
from llmlab.evaluate.next_token import perplexity_of
from llmlab.gpu_specs import peak_tflops
from llmlab.matmul import measure_matmul

try:
    import pynvml  # nvidia-ml-py: what torch.cuda reads GPU utilisation, memory and power with
except ImportError:  # optional: without it the GPU readings are None, not an error
    pynvml = None

from llmlab.units import GB  # the course's memory unit, 10^9 bytes (a GiB is 7% more)


@dataclass
class StepMetrics:
    step: int
    loss: float
    lr: float
    grad_norm: float | None  # before clipping
    tokens_per_s: float
    tokens_seen: int
    step_seconds: float
    data_seconds: float  # of step_seconds, the time spent fetching this process's batches
    mfu: float | None  # None when the device's peak is unknown
    # Memory in GB (10^9 bytes). CUDA: the peak PyTorch allocated during this step (the peak is
    # reset at every reading); CPU: the process's resident set size now.
    memory_gb: float
    cpu_util: float  # percent of all CPU cores this process kept busy since the previous step
    gpu_util: float | None  # percent of the time a kernel ran (NVML); None without a GPU or NVML
    gpu_memory_gb: float | None  # GB in use on the whole GPU, every process (NVML)
    gpu_power_w: float | None  # watts drawn by the GPU (NVML)
    gpu_temperature_c: float | None = None  # the GPU's core temperature (NVML)
    val_loss: float | None = None
    skipped: bool = False  # a non-finite loss was dropped (nan_policy="skip")
    # Several processes (None in one): each reading in RANK_READINGS as a list, one entry per
    # rank in rank order (None where a rank lacks it), and the ranks flagged as stragglers.
    ranks: dict[str, list[float | None]] | None = None
    stragglers: list[int] | None = None

    @property
    def perplexity(self) -> float | None:
        return perplexity_of(self.val_loss)


def format_perplexity(perplexity: float) -> str:
    """One decimal below a million, else scientific notation: a diverged run's validation loss
    of 504 has a perplexity of 219 digits."""
    return f"{perplexity:.1f}" if perplexity < 1e6 else f"{perplexity:.2e}"


class DeviceMonitor:
    """Per-step readings of the machine a run trains on: memory and CPU utilisation always, and
    on an NVIDIA GPU its utilisation, memory and power through NVML (when nvidia-ml-py is
    installed)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.process = psutil.Process()
        self.process.cpu_percent()  # starts the clock: each later call covers the time since
        self.cores = psutil.cpu_count() or 1
        self.nvml = device.type == "cuda" and pynvml is not None

    def read(self) -> dict:
        """StepMetrics' memory and utilisation fields, by name."""
        return {
            "memory_gb": self._memory_gb(),
            # psutil gives percent of one core; over a short step its clock ticks can overshoot.
            "cpu_util": min(100.0, self.process.cpu_percent() / self.cores),
            **self._gpu_readings(),
        }

    def _memory_gb(self) -> float:
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)  # so the next reading is its own step
            return peak / GB
        return self.process.memory_info().rss / GB

    def _gpu_readings(self) -> dict:
        unknown = dict.fromkeys(("gpu_util", "gpu_memory_gb", "gpu_power_w", "gpu_temperature_c"))
        if not self.nvml:
            return unknown
        try:  # torch.cuda maps the CUDA device to NVML's numbering (CUDA_VISIBLE_DEVICES)
            return {
                "gpu_util": float(torch.cuda.utilization(self.device)),
                "gpu_memory_gb": torch.cuda.device_memory_used(self.device) / GB,
                "gpu_power_w": torch.cuda.power_draw(self.device) / 1000,  # NVML: milliwatts
                "gpu_temperature_c": float(torch.cuda.temperature(self.device)),
            }
        except (pynvml.NVMLError, RuntimeError):  # a reading this GPU or driver does not offer
            return unknown


# What every rank reports at a logged step, gathered so rank 0 can write it for all of them.
# data_seconds is the straggler signal: the time the rank spent fetching its micro-batches and
# moving them to its device (Trainer.train_step says why that and not the step's time).
RANK_READINGS = (
    "data_seconds", "memory_gb", "gpu_util", "gpu_memory_gb", "gpu_power_w", "gpu_temperature_c",
)


def gather_rank_readings(
    own: dict[str, float | None], gather: Callable = gather_rank_values
) -> dict[str, list[float | None]] | None:
    """Every rank's RANK_READINGS (`own` is this rank's, by name), as one list per reading with
    one entry per rank: one small all_gather. None when this process runs alone. Per-rank lists
    rather than min/mean/max: with a handful of ranks a reader sees which rank is full, hot or
    slow, and any summary is one max() away."""
    rows = gather([own[name] for name in RANK_READINGS])
    if rows is None:
        return None
    return {name: [row[i] for row in rows] for i, name in enumerate(RANK_READINGS)}


def flag_stragglers(data_seconds: list[float], step_seconds: float, threshold: float) -> list[int]:
    """The ranks that made this step more than `threshold` longer (0.2: 20 %) than it would have
    been had they kept the median rank's pace, and whose data time exceeds the median's by that
    fraction too. Every rank waits for the slowest, so a rank's excess over the median is added
    to everyone's step: excess > threshold * (step_seconds - excess). Judged against the step,
    microseconds of jitter in a tiny data time are no straggler, however many medians they are.
    """
    # excess > t * (step - excess)  <=>  excess > t * step / (1 + t)
    cost = threshold * step_seconds / (1 + threshold)
    flagged = find_stragglers(data_seconds, threshold, min_excess_seconds=cost)
    return sorted(straggler.rank for straggler in flagged)


def measured_peak_flops(device: torch.device | str, dtype: str = "fp32") -> float:
    """The FLOP/s a square matmul reaches on `device` now (llmlab.matmul, about a second): the
    peak to divide by for MFU where there is no datasheet figure, as on a CPU."""
    return measure_matmul(1024, dtype, device, warmup=1, repeats=3).tflops * 1e12


def datasheet_peak_flops(device: torch.device, dtype: str) -> float | None:
    """The GPU's dense datasheet peak in `dtype` (llmlab.gpu_specs' table); None for a CPU or an
    unlisted GPU."""
    if device.type != "cuda":
        return None
    peak = peak_tflops(torch.cuda.get_device_name(device), dtype)
    return None if peak is None else peak * 1e12


def _set_aside_other_columns(csv_path: Path, columns: list[str]) -> None:
    """A metrics.csv written by another llmlab version has other columns: rows appended under its
    header would land in the wrong columns. Keep it whole under a free name and start a new one."""
    if not csv_path.exists() or csv_path.stat().st_size == 0:
        return
    with open(csv_path, newline="", encoding="utf-8") as file:
        header = next(csv.reader(file), [])
    if header == columns:
        return
    number = 1
    while (aside := csv_path.with_name(f"metrics.before-{number}.csv")).exists():
        number += 1
    csv_path.rename(aside)
    print(f"{csv_path.name} had other columns (an earlier llmlab version): kept as {aside.name}, "
          f"new rows go to a new {csv_path.name}", flush=True)


RESTART = "restart"  # the event of a restart record


class MetricsWriter:
    """Append each step's metrics to metrics.jsonl and metrics.csv in `out_dir` (if given)."""

    def __init__(self, out_dir: Path | None):
        self.history: list[StepMetrics] = []
        self._jsonl = self._csv = None
        self.continues_history = False  # whether metrics.jsonl already holds an attempt's records
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            jsonl_path = out_dir / "metrics.jsonl"
            self.continues_history = jsonl_path.exists() and jsonl_path.stat().st_size > 0
            # Always appended: a resumed or restarted run adds to the history, never erases it.
            self._jsonl = open(jsonl_path, "a", encoding="utf-8")  # noqa: SIM115
            csv_path = out_dir / "metrics.csv"
            # One column per StepMetrics field, and the event of a restart record.
            columns = [f.name for f in fields(StepMetrics)] + ["event"]
            _set_aside_other_columns(csv_path, columns)
            new_csv = not csv_path.exists() or csv_path.stat().st_size == 0
            self._csv_file = open(csv_path, "a", newline="", encoding="utf-8")  # noqa: SIM115
            self._csv = csv.DictWriter(self._csv_file, columns)
            if new_csv:
                self._csv.writeheader()

    def write(self, metrics: StepMetrics) -> None:
        self.history.append(metrics)
        row = asdict(metrics)
        # A CSV cell holds one value: the per-rank lists go in as JSON text (json.loads reads
        # them back), so both files keep one column per StepMetrics field.
        self._append(row, {key: json.dumps(value) if isinstance(value, dict | list) else value
                           for key, value in row.items()})

    def write_restart(self, step: int, checkpoint: Path | None) -> None:
        """The restart record: this run goes on after `step`, from `checkpoint` (0 and None: from
        the start). Write it before the run's first step."""
        record = {"event": RESTART, "step": step,
                  "checkpoint": checkpoint.name if checkpoint else None,
                  "time": datetime.now(UTC).isoformat(timespec="seconds")}
        self._append(record, {"step": step, "event": RESTART})

    def _append(self, record: dict, csv_row: dict) -> None:
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(record) + "\n")
            self._csv.writerow(csv_row)
            self._jsonl.flush()  # a crashed run keeps every step it logged
            self._csv_file.flush()

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._csv_file.close()


def read_metrics(out_dir: Path) -> list[dict]:
    """The steps logged in `out_dir`'s metrics.jsonl as they stand: one record per step, oldest
    first, as an uninterrupted run would have logged them.

    At a restart record the records of steps after its step are dropped: their attempt was cut
    short, and the steps were run again. Everything stays in the file; read it line by line for
    every attempt's records.
    """
    path = Path(out_dir) / "metrics.jsonl"
    kept = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            try:
                record = json.loads(line)
            except ValueError as error:
                raise ValueError(f"{path} line {number} is not a JSON record ({error}): "
                                 "remove or repair that line") from None
            if record.get("event") == RESTART:
                kept = [earlier for earlier in kept if earlier["step"] <= record["step"]]
            else:
                kept.append(record)
    return kept
