"""Helpers for the tests that launch "nodes" on this machine: the environment of a job with the
stand-in srun and scontrol (llmlab/course/stand_ins/) first on PATH, a run that cannot hang, the
ranks that finished, read off multinode_worker.py's output; the processes a job left; and a
progress bar that records what a launcher shows on it."""

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from llmlab.course.stand_ins import SLURM_STAND_INS
from llmlab.jobs.processes import kill_process_tree  # the whole tree: torchrun's workers too

HERE = Path(__file__).resolve().parent
WORKER = HERE / "multinode_worker.py"
LAUNCHER_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")


def job_env(**slurm) -> dict[str, str]:
    """This environment without any launcher's variables, the stand-in srun and scontrol first
    on PATH, and the variables given (those sbatch would set)."""
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_NAMES and not k.startswith("SLURM")}
    env.update(PATH=f"{SLURM_STAND_INS}{os.pathsep}{env['PATH']}", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(HERE.parents[1]),
                                                        env.get("PYTHONPATH")])))
    return {**env, **slurm}


def run(command: list[str], env: dict[str, str], timeout_s: float = 120) -> str:
    """Run to the end and return the output; fail with it on an error or past the time."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env)
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_process_tree(process.pid)
        output, _ = process.communicate()
        pytest.fail(f"still running after {timeout_s:g} s:\n{output}")
    assert process.returncode == 0, f"exit code {process.returncode}:\n{output}"
    return output


def joined(output: str) -> list[tuple[int, ...]]:
    """(rank, local rank, node, world size, all-reduced sum) of each rank that finished."""
    lines = re.findall(r"joined rank=(\d+) local=(\d+) node=(\d+) world=(\d+) sum=(\d+)", output)
    return sorted(tuple(map(int, line)) for line in lines)


def alive(pid: int) -> bool:
    """Whether process `pid` runs (Linux's /proc; a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # the state follows the (command name)


def survivors(pids: list[int], within_s: float = 60) -> list[int]:
    """The processes among `pids` still running once every killed one has had `within_s` seconds
    to go (a signal takes effect a moment after it is sent): [] when none outlived its job."""
    deadline = time.monotonic() + within_s
    while (running := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return running


def written_pids(folder: Path, count: int, within_s: float = 120) -> list[int]:
    """The process ids that `count` processes wrote to `folder`/*.pid, once they all have."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        pids = [text for f in folder.glob("*.pid") if (text := f.read_text()).isdigit()]
        if len(pids) == count:
            return sorted(map(int, pids))
        time.sleep(0.05)
    pytest.fail(f"{count} processes did not write their ids to {folder} within {within_s:g} s")


def write_pid(folder: str | Path, name: str, pid: int | None = None) -> None:
    """Leave this process's id (or `pid`) in `folder`/`name`.pid for the test to check on."""
    Path(folder, f"{name}.pid").write_text(str(pid or os.getpid()))


class RecordingBar:
    """Stands in for tqdm: records what a launcher shows on its progress bar."""

    made: list["RecordingBar"] = []

    def __init__(self, desc=None, total=None, unit=None):
        self.desc, self.total, self.postfixes, self.closed = desc, total, [], False
        RecordingBar.made.append(self)

    def set_postfix_str(self, text, refresh=True):
        self.postfixes.append(text)

    def update(self, n=1):
        pass

    def close(self):
        self.closed = True
