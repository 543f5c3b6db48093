"""launch() and run_script(): real processes, real gloo groups, and the failures users hit."""

import os
import signal
import sys
import time

import pytest
import torch
import torch.distributed as dist

from llmlab.distributed import LaunchError, launch, run_script, torchrun_command


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


def test_launch_runs_a_locally_defined_function_with_arguments():
    scale = 3.0

    def scaled(x):  # a closure, as a notebook cell would define: fork needs no import by name
        return x * scale * (dist.get_rank() + 1)

    out = launch(scaled, nprocs=2, args=(torch.ones(2),))
    assert torch.equal(out[0], torch.full((2,), 3.0)) and torch.equal(out[1], torch.full((2,), 6.0))


def _fails_on_rank_one():
    if dist.get_rank() == 1:
        raise ValueError("wrong shape on purpose")
    dist.barrier()  # rank 0 would wait here for ever without the timeout and the stop
    return "unreachable"


def test_an_error_on_one_rank_names_it_and_stops_the_others():
    start = time.monotonic()
    with pytest.raises(LaunchError, match=r"(?s)rank 1 raised.*ValueError: wrong shape on purpose"):
        launch(_fails_on_rank_one, nprocs=2, timeout_s=60)
    assert time.monotonic() - start < 30  # the grace period, not the collective timeout


def _dies_on_rank_zero():
    if dist.get_rank() == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def test_a_rank_that_dies_is_named_with_its_signal():
    with pytest.raises(LaunchError, match=r"rank 0 was killed by signal SIGKILL"):
        launch(_dies_on_rank_zero, nprocs=2, timeout_s=60)


def _hangs_on_rank_one():
    if dist.get_rank() == 1:
        time.sleep(60)  # never reaches the barrier
    dist.barrier()


def test_a_hang_ends_at_the_timeout_naming_the_ranks_still_running():
    start = time.monotonic()
    with pytest.raises(LaunchError, match=r"did not finish within 4 s"):
        launch(_hangs_on_rank_one, nprocs=2, timeout_s=4)
    assert time.monotonic() - start < 20


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


def test_torchrun_command_uses_this_python():
    command = torchrun_command("train.py", 4, ["--steps", 5])
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc_per_node=4" in command and command[-3:] == ["train.py", "--steps", "5"]
    assert torchrun_command("llmlab", 2, module=True)[-2:] == ["-m", "llmlab"]


def test_torchruns_own_options_come_before_the_script():
    command = torchrun_command("train.py", 2, ["out"], torchrun_args=["--max-restarts", 1])
    assert command[-4:] == ["--max-restarts", "1", "train.py", "out"]
