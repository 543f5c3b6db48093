"""`llmlab train` under torchrun: two CPU processes train together (DDP over gloo), rank 0 writes
the metrics and checkpoints, and a second call resumes the run in the same folder."""

import json
import subprocess
import sys


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
