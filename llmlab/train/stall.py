"""How long a checkpoint stops training: torch.distributed.checkpoint's save against async_save.

  sync   `dcp.save`: training waits until every byte is on disk;
  async  `dcp.async_save`: training waits only while the state is copied to memory (staging); a
         background thread writes it, and the next save first waits for the previous one.

The stall is the time a save call keeps the loop from its next step. Each saved checkpoint is then
loaded back and compared with a copy of the state taken when it was saved: an async checkpoint must
hold the weights of its step, not of a later one that training changed in the meantime.
One process, no process group (DCP then saves as a single rank).
"""

import contextlib
import os
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

from llmlab.units import MB

MODES = ("sync", "async")


@dataclass(frozen=True)
class StallRun:
    mode: str
    stalls: list[float]  # seconds each save kept the loop waiting
    waits: list[float]  # the part of each stall spent waiting for the previous save to finish
    step_seconds: list[float]  # each training step, saves excluded
    checkpoint_bytes: int  # the last checkpoint on disk
    wall_seconds: float  # the whole loop, the last background write included
    exact: bool  # every checkpoint holds the state of the step it was taken at

    @property
    def median_stall(self) -> float:
        return statistics.median(self.stalls)

    @property
    def median_wait(self) -> float:
        """Non-zero when saves come faster than the disk takes them: then async_save's stall
        is the previous write's, and only a longer interval between saves helps."""
        return statistics.median(self.waits)

    def row(self) -> dict:
        """One row of a table (llmlab.tables.markdown_table)."""
        return {"mode": self.mode, "saves": len(self.stalls),
                "checkpoint MB": f"{self.checkpoint_bytes / MB:.1f}",
                "median stall s": f"{self.median_stall:.3f}",
                "max stall s": f"{max(self.stalls):.3f}",
                "median step s": f"{statistics.median(self.step_seconds):.3f}",
                "wall s": f"{self.wall_seconds:.1f}", "checkpoints exact": self.exact}


def snapshot(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The state a checkpoint holds: weights and optimizer states, as DCP takes them."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def measure_stall(
    mode: str,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    train_step: Callable[[], None],
    folder: Path,
    steps: int = 12,
    every: int = 3,
) -> StallRun:
    """Train `steps` steps (`train_step()` runs one), saving under `folder` every `every` steps
    in `mode` ("sync" or "async"); time each save call and check every checkpoint afterwards.
    On a GPU each step is waited for (synchronized) before its time is read, so no queued
    training work is counted as part of a save."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: use one of {MODES}")
    if not 1 <= every <= steps:
        raise ValueError(f"every={every} with steps={steps}: save at least once (1 <= every <= "
                         "steps)")
    folder = Path(folder)
    stalls, waits, step_seconds, saved, pending = [], [], [], [], None
    wait_for_gpu = _synchronizer(model)
    with warnings.catch_warnings():
        # One process without a process group is what this measures; DCP warns that it assumes so.
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        # One untimed save first: the first call sets up DCP's planner (and async_save's thread),
        # a cost paid once per run, not at every save.
        _save(mode, snapshot(model, optimizer), folder / f"{mode}-warmup").result()
        started = time.perf_counter()
        for step in range(1, steps + 1):
            begin = time.perf_counter()
            train_step()
            wait_for_gpu()
            step_seconds.append(time.perf_counter() - begin)
            if step % every:
                continue
            target = folder / f"{mode}-{step}"
            state = snapshot(model, optimizer)
            saved.append((target, _copy(state)))  # what the checkpoint must hold (not timed)
            wait_for_gpu()
            begin = time.perf_counter()
            if pending is not None:
                pending.result()  # one save in flight at a time: its staged copy is then freed
            waits.append(time.perf_counter() - begin)
            pending = _save(mode, state, target)
            stalls.append(time.perf_counter() - begin)
        pending.result()
        wall = time.perf_counter() - started
        exact = all(_holds(target, expected, model, optimizer) for target, expected in saved)
    size = sum(p.stat().st_size for p in saved[-1][0].rglob("*") if p.is_file())
    return StallRun(mode, stalls, waits, step_seconds, size, wall, exact)


def _synchronizer(model: torch.nn.Module) -> Callable[[], None]:
    """Waits for the model's GPU, if it is on one (CUDA runs kernels after the call returns)."""
    device = next(model.parameters()).device
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def stall_parts(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    folder: Path,
    repeats: int = 3,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Where a synchronous `dcp.save` spends its time, measured inside real saves (medians over
    `repeats`, in seconds): `torch.save`, which DCP calls once per tensor to turn it into bytes
    in the file (that is, into the operating system's page cache); `os.fsync`, which waits until
    the page cache is on the disk (the data file, then the metadata file); and the rest: the
    plan, copies to the CPU (from a GPU), the metadata, creating and closing the files. Time
    with `clock`; a test passes a fake one."""
    state = snapshot(model, optimizer)
    serialise, flush = "torch.save: tensors to bytes in the page cache", "os.fsync: to the disk"
    rows = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        _save("sync", state, Path(folder) / "parts-warmup")  # DCP's one-off set-up, not timed
        for index in range(repeats):
            spent = {serialise: 0.0, flush: 0.0}
            with _timed(torch, "save", spent, serialise, clock), \
                    _timed(os, "fsync", spent, flush, clock):
                begin = clock()
                _save("sync", state, Path(folder) / f"parts-{index}")
                whole = clock() - begin
            rows.append({**spent, "the rest: plan, copies, metadata, files": whole - sum(
                spent.values()), "dcp.save in all": whole})
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


@contextlib.contextmanager
def _timed(module, name: str, spent: dict[str, float], key: str, clock: Callable[[], float]):
    """While inside, `module.name` adds the time of each of its calls to `spent[key]`."""
    original = getattr(module, name)

    def timed(*args, **kwargs):
        begin = clock()
        try:
            return original(*args, **kwargs)
        finally:
            spent[key] += clock() - begin

    with mock.patch.object(module, name, timed):
        yield


class _Done:
    """What a synchronous save returns: already finished."""

    def result(self) -> None:
        return None


def _save(mode: str, state: dict, target: Path):
    """Start a save; `.result()` waits for it (at once for a synchronous one)."""
    if mode == "sync":
        dcp.save(state, checkpoint_id=target)
        return _Done()
    return dcp.async_save(state, checkpoint_id=target)


def _holds(folder: Path, expected: dict, model, optimizer) -> bool:
    """Whether the checkpoint in `folder` holds exactly the `expected` tensors."""
    loaded = _copy(snapshot(model, optimizer))  # the right structure; dcp.load overwrites it
    dcp.load(loaded, checkpoint_id=folder)
    got, wanted = _tensors(loaded), _tensors(expected)
    return got.keys() == wanted.keys() and all(torch.equal(got[k], wanted[k]) for k in got)


def _copy(value):
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value.clone() if isinstance(value, torch.Tensor) else value


def _tensors(tree, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested state dict, by its dotted path."""
    if not isinstance(tree, dict):
        return {prefix: tree} if isinstance(tree, torch.Tensor) else {}
    found = {}
    for key, sub in tree.items():
        found.update(_tensors(sub, f"{prefix}{key}."))
    return found
