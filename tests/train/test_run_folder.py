"""One live run per folder: a second run started in the folder of a live one (another process, or
this one) is refused with the holder's pid and host, before it touches anything, so the live run's
half-written checkpoint survives and the live run ends well; a run killed with SIGKILL leaves no
stale lock, and the next run sweeps what it left."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import WORKERS
from helpers.train_fakes import RandomWindows, config, tiny_gpt2, token_stream

from llmlab.train import RunFolderBusy, Trainer, read_metrics, verify_checkpoint
from llmlab.train.run_folder import LOCK_FILE, RunLock

WORKER = WORKERS / "run_folder_worker.py"


def second_run(out_dir: Path) -> Trainer:
    """Another run in out_dir, as run_folder_worker.py trains it."""
    settings = config(max_steps=3, checkpoint_interval=1, eval_interval=100, out_dir=out_dir)
    return Trainer(tiny_gpt2(), settings, RandomWindows(token_stream(), 4))


def start_holder(out_dir: Path) -> subprocess.Popen:
    """run_folder_worker.py in a process of its own, once it waits inside checkpoint 2's save."""
    command = [sys.executable, str(WORKER), str(out_dir)]
    holder = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300  # a guard against a hang, not a measurement
    while not (out_dir / "holding").exists():
        if holder.poll() is not None or time.monotonic() > deadline:
            holder.kill()
            pytest.fail(f"the holder never got to its save:\n{holder.communicate()[0][-3000:]}")
        time.sleep(0.05)
    return holder


def in_flight(out_dir: Path) -> list[Path]:
    return sorted((out_dir / "checkpoints").glob(".step_0000002.*.tmp"))


def test_a_second_run_is_refused_naming_the_holder_and_the_live_run_ends_well(tmp_path):
    holder = start_holder(tmp_path)
    try:
        assert len(in_flight(tmp_path)) == 1  # the holder is writing checkpoint 2
        with pytest.raises(RunFolderBusy) as refused:
            second_run(tmp_path).fit(resume=True)
        message = str(refused.value)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in message
        assert str(tmp_path) in message and "use another folder" in message
        assert len(in_flight(tmp_path)) == 1  # not swept: its writer is alive
    finally:
        (tmp_path / "go").touch()
        output = holder.communicate(timeout=300)[0]
    assert holder.returncode == 0, output[-3000:]
    assert [row["step"] for row in read_metrics(tmp_path)] == [1, 2, 3]
    raw = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(raw) == 3  # the refused run wrote nothing
    for step in (2, 3):
        verify_checkpoint(tmp_path / "checkpoints" / f"step_{step:07d}")


def test_a_run_killed_with_sigkill_leaves_no_stale_lock(tmp_path, capsys):
    holder = start_holder(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.communicate(timeout=60)
    (stale,) = in_flight(tmp_path)
    holding = json.loads((tmp_path / LOCK_FILE).read_text())
    assert holding["pid"] == holder.pid  # the file stays; its lock went with the process
    second_run(tmp_path).fit(resume=True)
    out = capsys.readouterr().out
    assert f"removed {stale.name}, left by an interrupted save" in out  # its writer is gone
    assert "resumed from step 1" in out
    assert [row["step"] for row in read_metrics(tmp_path)] == [1, 2, 3]


def test_a_second_run_in_the_same_process_is_refused_too(tmp_path):
    held = RunLock(tmp_path)
    held.acquire()
    try:
        with pytest.raises(RunFolderBusy, match=f"pid {os.getpid()} on host"):
            second_run(tmp_path).fit()
        assert not (tmp_path / "metrics.jsonl").exists()
    finally:
        held.release()
    second_run(tmp_path).fit()  # released: the folder is free again
    assert [row["step"] for row in read_metrics(tmp_path)] == [1, 2, 3]
