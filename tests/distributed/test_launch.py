"""launch() and run_script(): real processes, real gloo groups, and the failures users hit."""

import importlib
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest
import torch
import torch.distributed as dist
from helpers.launch import alive, job_env, survivors, write_pid, written_pids

from llmlab.distributed import LaunchError, launch, run_script, torchrun_command
from llmlab.distributed.launch import GRACE_S

# The module itself: the package's name `launch` is the function
launch_module = importlib.import_module("llmlab.distributed.launch")

needs_linux = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; Linux's prctl")


def _rank_and_sum():
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    print(f"threads={torch.get_num_threads()}")
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": value.item()}


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_launch_returns_each_ranks_result_in_order(nprocs, capsys):
    results = launch(_rank_and_sum, nprocs=nprocs, timeout_s=60)
    total = nprocs * (nprocs + 1) / 2
    assert results == [{"rank": r, "world": nprocs, "sum": total} for r in range(nprocs)]
    output = capsys.readouterr().out
    for rank in range(nprocs):
        assert f"[rank {rank}] threads=1" in output  # prefixed, and one math thread each


def _meeting_port() -> int:
    return int(os.environ["MASTER_PORT"])


def test_launch_never_meets_at_a_port_another_process_can_take(monkeypatch):
    """A port only picked as free (and closed again) can be taken by any process before rank 0
    listens on it; CI once lost a run to EADDRINUSE that way. Here every pick is a port already
    taken: the launcher must not rely on picking one."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        monkeypatch.setattr(launch_module, "free_port", lambda: taken.getsockname()[1])
        ports = launch(_meeting_port, 2, timeout_s=30)
        assert ports[0] == ports[1] != taken.getsockname()[1]


def test_free_port_is_outside_the_range_the_kernel_hands_out():
    port = launch_module.free_port()
    assert 1024 < port < 32768  # below Linux's default ephemeral range (32768-60999)
    with socket.create_server(("127.0.0.1", port)):
        pass


def test_launch_runs_a_locally_defined_function_with_arguments():
    scale = 3.0

    def scaled(x):  # a closure, as a notebook cell would define: fork needs no import by name
        return x * scale * (dist.get_rank() + 1)

    out = launch(scaled, nprocs=2, args=(torch.ones(2),))
    assert torch.equal(out[0], torch.full((2,), 3.0)) and torch.equal(out[1], torch.full((2,), 6.0))


def _fails_on_rank_one():
    if dist.get_rank() == 1:
        raise ValueError("wrong shape on purpose")
    threading.Event().wait()  # rank 0 would wait here for ever: only the launcher can stop it


def test_an_error_on_one_rank_names_it_and_stops_the_others():
    # The launcher's own limit is far away: the others are stopped GRACE_S after the error.
    stopped = rf"rank\(s\) \[0\], still running {GRACE_S:g} s later, were stopped$"
    with pytest.raises(LaunchError, match=rf"(?s)rank 1 raised.*ValueError: wrong.*{stopped}"):
        launch(_fails_on_rank_one, nprocs=2, timeout_s=600)


def _dies_on_rank_zero():
    if dist.get_rank() == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def test_a_rank_that_dies_is_named_with_its_signal():
    with pytest.raises(LaunchError, match=r"rank 0 was killed by signal SIGKILL"):
        launch(_dies_on_rank_zero, nprocs=2, timeout_s=60)


def _rank_one_hangs():
    if dist.get_rank() == 1:
        threading.Event().wait()  # never returns; rank 0 returns, then waits in the last barrier


def test_a_hang_ends_at_the_timeout_naming_only_the_ranks_still_running():
    # 20 s: far more than the ranks take to start, so rank 0 has returned by then
    with pytest.raises(LaunchError, match=r"^rank\(s\) \[1\] did not finish within 20 s"):
        launch(_rank_one_hangs, nprocs=2, timeout_s=20)


def _start_a_sleeper_then_fail_on_rank_one(folder):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    write_pid(folder, f"sleeper-{dist.get_rank()}", sleeper.pid)
    dist.barrier()  # both have started theirs
    if dist.get_rank() == 1:
        raise ValueError("failed on purpose")
    threading.Event().wait()  # rank 0 is stopped by the launcher


@needs_linux
def test_processes_that_ranks_started_go_with_them(tmp_path):
    with pytest.raises(LaunchError, match="failed on purpose"):
        launch(_start_a_sleeper_then_fail_on_rank_one, nprocs=2, args=(tmp_path,), timeout_s=600)
    assert survivors(written_pids(tmp_path, 2)) == []


# A notebook kernel that launches two ranks which wait for ever.
KERNEL = """
import os, sys, threading
from pathlib import Path
import torch.distributed as dist
from llmlab.distributed import launch

def wait_for_ever(folder):
    Path(folder, f"rank-{dist.get_rank()}.pid").write_text(str(os.getpid()))
    threading.Event().wait()

launch(wait_for_ever, nprocs=2, args=(sys.argv[1],), timeout_s=600)
"""


@needs_linux
def test_the_ranks_go_when_the_launching_process_is_killed(tmp_path):
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, str(tmp_path)], env=job_env())
    try:
        ranks = written_pids(tmp_path, 2)
    finally:
        kernel.kill()  # as a notebook kernel is, by its user or for lack of memory
        kernel.wait()
    assert survivors(ranks) == []


# The same, each rank having started a child first.
KERNEL_RANKS_WITH_CHILDREN = KERNEL.replace(
    "    threading.Event().wait()",
    "    import subprocess\n"
    "    child = subprocess.Popen(['sleep', '600'])\n"
    "    Path(folder, f'child-{dist.get_rank()}.pid').write_text(str(child.pid))\n"
    "    threading.Event().wait()")


@needs_linux
def test_what_the_ranks_started_goes_with_them_when_the_launching_process_is_killed(tmp_path):
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL_RANKS_WITH_CHILDREN, str(tmp_path)],
                              env=job_env())  # fmt: skip
    try:
        pids = written_pids(tmp_path, 4)  # two ranks, two children
    finally:
        kernel.kill()
        kernel.wait()
    assert survivors(pids) == []


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match="positive integer"):
        launch(_rank_and_sum, nprocs=0)
    if torch.cuda.device_count() < 2:
        with pytest.raises(ValueError, match="one CUDA GPU per rank"):
            launch(_rank_and_sum, nprocs=2, backend="nccl")
    with pytest.raises(FileNotFoundError, match="write it first"):
        run_script("no_such_script.py")


SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
value = torch.tensor([1.0])
dist.all_reduce(value)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} sees {value.item():g}", flush=True)
dist.destroy_process_group()
{extra}
"""


@pytest.mark.slow
def test_run_script_streams_rank_prefixed_output(tmp_path, capsys):
    script = tmp_path / "allreduce.py"
    script.write_text(SCRIPT.replace("{extra}", ""))
    output = run_script(script, nprocs=2, timeout_s=120)
    assert "[default0]:rank 0 of 2 sees 2" in output
    assert "[default1]:rank 1 of 2 sees 2" in output
    assert "rank 1 of 2 sees 2" in capsys.readouterr().out  # shown as it ran, not only returned


@pytest.mark.slow
def test_run_script_failure_raises_with_the_output_end(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(SCRIPT.replace("{extra}", "raise SystemExit(3)"))
    with pytest.raises(LaunchError, match=r"torchrun exited with code 1"):
        run_script(script, nprocs=2, timeout_s=120)


# Each rank leaves its id (or that of the process it started) in the folder given, then acts.
RANK_SCRIPT = """
import os, subprocess, sys, time
from pathlib import Path
folder, rank = Path(sys.argv[1]), int(os.environ["RANK"])
{body}
"""
HANGS_ON_RANK_1 = """
Path(folder, f"rank-{rank}.pid").write_text(str(os.getpid()))
if rank == 1:
    time.sleep(600)
"""
WAITS = """
Path(folder, f"rank-{rank}.pid").write_text(str(os.getpid()))
time.sleep(600)
"""
SLEEPER_THEN_FAILS_ON_RANK_1 = """
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
Path(folder, f"sleeper-{rank}.pid").write_text(str(sleeper.pid))
while len(list(folder.glob("*.pid"))) < 2:  # both sleepers have started
    time.sleep(0.05)
if rank == 1:
    sys.exit(3)
time.sleep(600)
"""


@needs_linux
@pytest.mark.slow
def test_run_script_past_its_time_is_an_error_naming_the_ranks_still_running(tmp_path):
    script = tmp_path / "hangs.py"
    script.write_text(RANK_SCRIPT.format(body=HANGS_ON_RANK_1))
    # 30 s: far more than torchrun takes to start two ranks, so rank 0 has ended by then
    message = r"did not finish within 30 s, rank\(s\) \[1\] still running; every process .* stopped"
    with pytest.raises(LaunchError, match=message):
        run_script(script, nprocs=2, script_args=[tmp_path], timeout_s=30)
    assert survivors(written_pids(tmp_path, 2)) == []


@needs_linux
@pytest.mark.slow
def test_run_script_stops_what_a_failed_rank_started(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(RANK_SCRIPT.format(body=SLEEPER_THEN_FAILS_ON_RANK_1))
    with pytest.raises(LaunchError, match=r"torchrun exited with code 1"):
        run_script(script, nprocs=2, script_args=[tmp_path], timeout_s=600)
    assert survivors(written_pids(tmp_path, 2)) == []


# Each rank starts a helper with a clean environment (no LLMLAB_JOB tag to find it by), in a
# session of its own (torchrun's process tree does not reach it), and ends.
CLEAN_HELPER = """
helper = subprocess.Popen(["env", "-i", "sleep", "600"], start_new_session=True)
Path(folder, f"helper-{rank}.pid").write_text(str(helper.pid))
"""


@needs_linux
@pytest.mark.slow
def test_run_script_stops_a_helper_a_rank_started_with_a_clean_environment(tmp_path):
    script = tmp_path / "helper.py"
    script.write_text(RANK_SCRIPT.format(body=CLEAN_HELPER))
    run_script(script, nprocs=2, script_args=[tmp_path], timeout_s=600)
    assert survivors(written_pids(tmp_path, 2)) == []


# A notebook kernel that runs a script whose ranks wait for ever under torchrun.
SCRIPT_KERNEL = """
import sys
from llmlab.distributed import run_script
run_script(sys.argv[1], nprocs=2, script_args=[sys.argv[2]], timeout_s=600)
"""


@needs_linux
@pytest.mark.slow
def test_run_scripts_ranks_go_when_the_launching_process_is_killed(tmp_path):
    script = tmp_path / "waits.py"
    script.write_text(RANK_SCRIPT.format(body=WAITS))
    kernel = subprocess.Popen([sys.executable, "-c", SCRIPT_KERNEL, str(script), str(tmp_path)],
                              env=job_env())  # fmt: skip
    try:
        ranks = written_pids(tmp_path, 2)
    finally:
        kernel.kill()
        kernel.wait()
    assert survivors(ranks) == []


def test_torchrun_command_uses_this_python():
    command = torchrun_command("train.py", 4, ["--steps", 5])
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc_per_node=4" in command and command[-3:] == ["train.py", "--steps", "5"]
    assert torchrun_command("llmlab", 2, module=True)[-2:] == ["-m", "llmlab"]


def test_torchruns_own_options_come_before_the_script():
    command = torchrun_command("train.py", 2, ["out"], torchrun_args=["--max-restarts", 1])
    assert command[-4:] == ["--max-restarts", "1", "train.py", "out"]


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


@pytest.fixture
def bars(monkeypatch):
    RecordingBar.made = []
    monkeypatch.setattr(launch_module, "tqdm", RecordingBar)
    return RecordingBar.made


def _rank_0_counts_to_three():
    for step in range(3 if dist.get_rank() == 0 else 5):
        print(f"rank {dist.get_rank()} step {step + 1}", flush=True)


def test_launch_progress_is_fed_by_rank_0s_lines(bars):
    launch(_rank_0_counts_to_three, nprocs=2, timeout_s=60, progress="demo", progress_lines=3)
    [bar] = bars
    assert (bar.desc, bar.total, bar.closed) == ("demo", 3, True)
    assert bar.postfixes == ["rank 0 step 1", "rank 0 step 2", "rank 0 step 3"]


def test_without_progress_no_bar_is_made(bars):
    launch(_rank_0_counts_to_three, nprocs=2, timeout_s=60)
    assert bars == []


@pytest.mark.slow
def test_run_script_progress_counts_rank_0_and_the_launcher_not_the_others(tmp_path, bars):
    script = tmp_path / "allreduce.py"
    script.write_text(SCRIPT.replace("{extra}", ""))
    run_script(script, nprocs=2, timeout_s=120, progress="torchrun")
    [bar] = bars
    assert "[default0]:rank 0 of 2 sees 2" in bar.postfixes and bar.closed
    assert not any(text.startswith("[default1]") for text in bar.postfixes)


def test_run_command_returns_the_output_without_printing_it(bars, capsys):
    command = [sys.executable, "-c", "print('one'); print('two')"]
    assert launch_module.run_command(command, progress="job") == "one\ntwo\n"
    assert capsys.readouterr().out == ""
    assert bars[0].postfixes == ["one", "two"] and bars[0].closed


def test_run_command_failure_and_timeout_are_errors_with_the_last_lines():
    fails = [sys.executable, "-c", "print('about to fail'); raise SystemExit(4)"]
    with pytest.raises(LaunchError, match=r"exited with code 4. Its last lines:\nabout to fail"):
        launch_module.run_command(fails)
    hangs = [sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(60)"]
    with pytest.raises(LaunchError, match=r"did not finish within 1 s.*\nwaiting"):
        launch_module.run_command(hangs, timeout_s=1)


@needs_linux
def test_run_command_ending_with_a_child_still_holding_its_output_succeeds_and_stops_it():
    # The shell exits 0 at once; the sleep it left in the background keeps the output open.
    command = ["sh", "-c", "sleep 60 & echo $!; echo done"]
    output = launch_module.run_command(command, timeout_s=30)
    child, said = output.split()
    assert said == "done"
    assert not alive(int(child))


@needs_linux
def test_run_command_stops_a_daemon_its_command_left_behind():
    # A double fork: the command starts a process in a session of its own and exits; the
    # process, orphaned, no longer descends from the command.
    command = [sys.executable, "-c", "import subprocess; print(subprocess.Popen(['sleep', '60'], "
               "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"]
    daemon = int(launch_module.run_command(command, timeout_s=30))
    assert not alive(daemon)
