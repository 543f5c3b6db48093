"""Per-step training metrics, written as JSON lines and CSV as they come."""

import csv
import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import psutil
import torch


@dataclass
class StepMetrics:
    step: int
    loss: float
    lr: float
    grad_norm: float | None  # before clipping
    tokens_per_s: float
    tokens_seen: int
    step_seconds: float
    mfu: float | None  # None when the device's peak is unknown
    memory_gb: float  # CUDA: peak allocated since the last log; CPU: resident set size
    gpu_util: float | None  # percent, from NVML when available
    val_loss: float | None = None
    skipped: bool = False  # a non-finite loss was dropped (nan_policy="skip")

    @property
    def perplexity(self) -> float | None:
        return None if self.val_loss is None else math.exp(self.val_loss)


def memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        return peak / 2**30
    return psutil.Process().memory_info().rss / 2**30


def gpu_utilization(device: torch.device) -> float | None:
    """Percent of the last sample period the GPU was busy (needs NVML: nvidia-ml-py)."""
    if device.type != "cuda":
        return None
    try:
        return float(torch.cuda.utilization(device))
    except Exception:  # NVML missing or unsupported: unknown, not zero
        return None


class MetricsWriter:
    """Append each step's metrics to metrics.jsonl and metrics.csv in `out_dir` (if given)."""

    def __init__(self, out_dir: Path | None, resume: bool = False):
        self.history: list[StepMetrics] = []
        self._jsonl = self._csv = None
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            mode = "a" if resume else "w"
            self._jsonl = open(out_dir / "metrics.jsonl", mode, encoding="utf-8")  # noqa: SIM115
            csv_path = out_dir / "metrics.csv"
            new_csv = mode == "w" or not csv_path.exists()
            self._csv_file = open(csv_path, mode, newline="", encoding="utf-8")  # noqa: SIM115
            self._csv = csv.DictWriter(self._csv_file, [f.name for f in fields(StepMetrics)])
            if new_csv:
                self._csv.writeheader()

    def write(self, metrics: StepMetrics) -> None:
        self.history.append(metrics)
        if self._jsonl is not None:
            row = asdict(metrics)
            self._jsonl.write(json.dumps(row) + "\n")
            self._csv.writerow(row)
            self._jsonl.flush()  # a crashed run keeps every step it logged
            self._csv_file.flush()

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._csv_file.close()
