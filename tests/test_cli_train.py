"""`llmlab train`: under torchrun two CPU processes train together (DDP over gloo), rank 0 writes
the metrics and checkpoints, a second call resumes the run in the same folder, and every run ends;
alone, a finished run says so, an earlier run is not restarted silently, and bad arguments are
one-line errors with exit code 2."""

import json
import re
import shutil
import subprocess
import sys

import psutil
import pytest
from train_fakes import RandomWindows, tiny_gpt2, token_stream

from llmlab.cli import main
from llmlab.train import TrainConfig, Trainer


def torchrun(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "-m", "llmlab", "train", "--profile", "smoke", *args]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_two_processes_train_and_a_second_call_resumes(tmp_path):
    first = torchrun("--steps", "2", "--out", str(tmp_path))
    assert first.returncode == 0, first.stderr[-2000:]
    assert "2 steps on 2 process(es)" in first.stdout
    assert (tmp_path / "checkpoints" / "step_0000002" / "model.safetensors").is_file()

    second = torchrun("--steps", "4", "--out", str(tmp_path))
    assert second.returncode == 0, second.stderr[-2000:]
    assert "4 steps on 2 process(es)" in second.stdout
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").open()]
    assert steps == [2, 4]  # each run logs its last step; the resumed run appends
    tokens = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["tokens_seen"]
    assert tokens == 4 * 2 * 8 * 128  # steps x processes x micro-batch x sequence


def torchrun_until(timeout: float, *args: str) -> subprocess.CompletedProcess | None:
    """torchrun ... llmlab train; None (and torchrun and its workers killed) when it is still
    running after `timeout` seconds."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "-m", "llmlab", "train", "--profile", "smoke", *args]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as process:  # fmt: skip
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # Each worker runs in a session of its own (torchrun's choice): kill them by id.
            for child in psutil.Process(process.pid).children(recursive=True):
                child.kill()
            process.kill()
            process.communicate()
            return None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def test_the_readme_ddp_command_ends_after_training_every_time():
    """The process group is left in a safe order (DDP wrapper freed, barrier, destroy); before,
    a rank could deadlock in the group's destructor after training, in 1 to 3 runs of 5."""
    for attempt in range(5):
        run = torchrun_until(150, "--steps", "1")
        assert run is not None, f"run {attempt + 1} of 5 hung after training"
        assert run.returncode == 0, run.stderr[-2000:]
        assert "1 steps on 2 process(es)" in run.stdout


# ---------------------------------------------------------------- one process, in this process


def train(*args: str) -> int:
    return main(["train", "--profile", "smoke", *args])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    return line


def test_a_finished_run_says_it_is_complete_and_exits_0(tmp_path, capsys):
    assert train("--steps", "2", "--checkpoint-every", "1", "--out", str(tmp_path)) == 0
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*"))
    assert checkpoints == ["step_0000001", "step_0000002"]  # mid-run too, as asked
    capsys.readouterr()
    assert train("--steps", "2", "--out", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "is already complete (step 2, max_steps 2)" in out
    assert "2 steps on 1 process(es), profile smoke: validation loss" in out


def test_an_earlier_run_without_checkpoints_needs_fresh(tmp_path, capsys):
    assert train("--steps", "1", "--out", str(tmp_path)) == 0
    shutil.rmtree(tmp_path / "checkpoints")
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        train("--steps", "1", "--out", str(tmp_path))
    assert stopped.value.code == 2
    assert "holds an earlier run (metrics.jsonl, metrics.csv)" in one_error_line(capsys)
    assert train("--steps", "1", "--out", str(tmp_path), "--fresh") == 0
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2  # appended


def test_another_models_checkpoint_is_a_one_line_error(tmp_path, capsys):
    other = TrainConfig(max_steps=1, micro_batch_size=2, seq_len=16, dtype="fp32", device="cpu",
                        out_dir=tmp_path, progress=False)  # fmt: skip
    Trainer(tiny_gpt2(), other, RandomWindows(token_stream(), 2)).fit()
    with pytest.raises(SystemExit) as stopped:
        train("--steps", "2", "--out", str(tmp_path))
    assert stopped.value.code == 2
    assert re.search(r"step_0000001 was saved from a different model.*--fresh",
                     one_error_line(capsys))  # fmt: skip


@pytest.mark.parametrize(
    "args, message",
    [(["--profile", "huge"], "unknown profile 'huge'"),
     (["--out", "{file}"], "is a file"),
     (["--out", "{file}/run"], "cannot be created")],
    ids=["unknown-profile", "out-is-a-file", "out-cannot-be-made"],
)  # fmt: skip
def test_bad_arguments_are_one_line_errors_with_exit_code_2(tmp_path, capsys, args, message):
    file = tmp_path / "notes.txt"
    file.write_text("not a folder")
    with pytest.raises(SystemExit) as stopped:
        main(["train", *[arg.format(file=file) for arg in args]])
    assert stopped.value.code == 2
    assert message in one_error_line(capsys)
