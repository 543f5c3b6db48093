"""run_script() and run_command(): real launchers, real processes, and none left behind."""

import subprocess
import sys

import pytest
from helpers.launch import alive, job_env, survivors, written_pids

from llmlab.distributed import LaunchError
from llmlab.jobs.processes import run_command, run_script

needs_linux = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; Linux's prctl")


def test_a_missing_script_is_refused_clearly():
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
    # 15 s: the test waits all of it; rank 0 (which imports nothing) has ended 1.6 s after the
    # start on 2 loaded cores (torchrun's own import of torch), so nine times that is left over
    message = r"did not finish within 15 s, rank\(s\) \[1\] still running; every process .* stopped"
    with pytest.raises(LaunchError, match=message):
        run_script(script, nprocs=2, script_args=[tmp_path], timeout_s=15)
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
from llmlab.jobs import run_script
run_script(sys.argv[1], nprocs=2, script_args=[sys.argv[2]], timeout_s=600)
"""


@needs_linux
@pytest.mark.slow
def test_run_scripts_ranks_go_when_the_launching_process_is_killed(tmp_path):
    script = tmp_path / "waits.py"
    script.write_text(RANK_SCRIPT.format(body=WAITS))
    # TMPDIR: run_script's folder for torchrun's logs, which a killed process cannot remove,
    # goes where pytest removes it, not in /tmp.
    kernel = subprocess.Popen([sys.executable, "-c", SCRIPT_KERNEL, str(script), str(tmp_path)],
                              env={**job_env(), "TMPDIR": str(tmp_path)})
    try:
        ranks = written_pids(tmp_path, 2)
    finally:
        kernel.kill()
        kernel.wait()
    assert survivors(ranks) == []


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
    assert run_command(command, progress="job") == "one\ntwo\n"
    assert capsys.readouterr().out == ""
    assert bars[0].postfixes == ["one", "two"] and bars[0].closed


def test_run_command_failure_and_timeout_are_errors_with_the_last_lines():
    fails = [sys.executable, "-c", "print('about to fail'); raise SystemExit(4)"]
    with pytest.raises(LaunchError, match=r"exited with code 4. Its last lines:\nabout to fail"):
        run_command(fails)
    hangs = [sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(60)"]
    with pytest.raises(LaunchError, match=r"did not finish within 1 s.*\nwaiting"):
        run_command(hangs, timeout_s=1)


@needs_linux
def test_run_command_ending_with_a_child_still_holding_its_output_succeeds_and_stops_it():
    # The shell exits 0 at once; the sleep it left in the background keeps the output open.
    command = ["sh", "-c", "sleep 60 & echo $!; echo done"]
    output = run_command(command, timeout_s=30)
    child, said = output.split()
    assert said == "done"
    assert not alive(int(child))


@needs_linux
def test_run_command_stops_a_daemon_its_command_left_behind():
    # A double fork: the command starts a process in a session of its own and exits; the
    # process, orphaned, no longer descends from the command.
    command = [sys.executable, "-c", "import subprocess; print(subprocess.Popen(['sleep', '60'], "
               "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"]
    daemon = int(run_command(command, timeout_s=30))
    assert not alive(daemon)
