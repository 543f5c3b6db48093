"""Kill `llmlab train` with SIGKILL again and again, resume it each time, and check the result.

For 1 process and for 2 processes (torchrun, gloo), it:
  1. trains the smoke recipe straight through (the reference);
  2. trains it again in another folder, killing the whole run with SIGKILL `--kills` times (half
     at random moments, half the moment a checkpoint starts being written) and restarting it
     with the same command until it finishes;
then reports, from the files the runs left:
  - whether every logged loss (restarts log some steps twice) equals the reference's, bit for bit;
  - whether the final weights equal the reference's, bit for bit;
  - checkpoints that fail verification after any kill, and temporaries left at the end;
  - whether a flipped byte in each file of the final checkpoint is detected.

    python benchmarks/kill_resume.py --kills 10 --steps 60
"""

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from llmlab.jobs.processes import kill_process_tree
from llmlab.tables import markdown_table
from llmlab.train import CheckpointCorrupt, verify_checkpoint
from llmlab.train.checkpoint import completed_checkpoints
from llmlab.train.metrics import RESTART

VENV_BIN = Path(sys.executable).parent


def command(processes: int, steps: int, every: int, out: Path) -> list[str]:
    train = ["train", "--profile", "smoke", "--steps", str(steps),
             "--checkpoint-every", str(every), "--out", str(out)]
    if processes == 1:
        return [str(VENV_BIN / "llmlab"), *train]
    return [str(VENV_BIN / "torchrun"), "--nproc_per_node", str(processes), "-m", "llmlab", *train]


def start(cmd: list[str], log) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def writing_checkpoint(checkpoints: Path) -> bool:
    return checkpoints.is_dir() and any(p.name.endswith(".tmp") for p in checkpoints.iterdir())


def run_with_kills(cmd, out: Path, kills: int, rng: random.Random, log) -> tuple[int, int, list]:
    """Run `cmd` to completion, killing it `kills` times; (kills done, during saves, corrupt)."""
    done = during_save = 0
    corrupt: list[str] = []
    checkpoints = out / "checkpoints"
    while True:
        process = start(cmd, log)
        aim_at_save = done < kills and done % 2 == 1
        deadline = time.monotonic() + rng.uniform(3.0, 15.0)
        while process.poll() is None and done < kills:
            if aim_at_save and writing_checkpoint(checkpoints):
                break
            if not aim_at_save and time.monotonic() > deadline:
                break
            time.sleep(0.002)
        if process.poll() is None and done < kills:
            during_save += writing_checkpoint(checkpoints)
            kill_process_tree(process.pid)
            process.wait()
            done += 1
            for checkpoint in completed_checkpoints(checkpoints):
                try:
                    verify_checkpoint(checkpoint)
                except CheckpointCorrupt as error:
                    corrupt.append(str(error))
            continue
        if process.wait() != 0:
            raise SystemExit(f"the run failed with exit code {process.returncode}: see {log.name}")
        return done, during_save, corrupt


def losses(out: Path) -> dict[int, list[float]]:
    """Every loss logged for each step (a resumed run logs the steps after its checkpoint again,
    after a restart record)."""
    by_step: dict[int, list[float]] = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("event") != RESTART:
            by_step.setdefault(row["step"], []).append(row["loss"])
    return by_step


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(completed_checkpoints(out / "checkpoints")[-1] / "model.safetensors")


def tampering_detected(out: Path, scratch: Path) -> tuple[int, int]:
    """Flip one byte in the middle of each file of the final checkpoint (a copy): detected/tried."""
    source = completed_checkpoints(out / "checkpoints")[-1]
    detected = tried = 0
    for file in sorted(p for p in source.iterdir() if p.is_file()):
        copy = scratch / f"tampered-{file.name}" / source.name
        shutil.copytree(source, copy)
        data = bytearray((copy / file.name).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (copy / file.name).write_bytes(bytes(data))
        tried += 1
        try:
            verify_checkpoint(copy)
        except CheckpointCorrupt:
            detected += 1
    return detected, tried


def soak(processes: int, args, scratch: Path, rng: random.Random) -> dict:
    reference, killed = scratch / f"reference-{processes}", scratch / f"killed-{processes}"
    with open(scratch / f"log-{processes}.txt", "w") as log:
        subprocess.run(command(processes, args.steps, args.every, reference), stdout=log,
                       stderr=subprocess.STDOUT, check=True)
        started = time.perf_counter()
        kills, during_save, corrupt = run_with_kills(
            command(processes, args.steps, args.every, killed), killed, args.kills, rng, log
        )
    expected, got = losses(reference), losses(killed)
    same_losses = set(got) == set(expected) and all(
        loss == expected[step][0] for step, logged in got.items() for loss in logged
    )
    weights_a, weights_b = final_weights(reference), final_weights(killed)
    same_weights = weights_a.keys() == weights_b.keys() and all(
        torch.equal(weights_a[k], weights_b[k]) for k in weights_a
    )
    leftovers = [p.name for p in (killed / "checkpoints").iterdir() if p.name.endswith(".tmp")]
    detected, tried = tampering_detected(killed, scratch / f"tampered-{processes}")
    for problem in sorted(set(corrupt)):
        print(f"corrupt after a kill ({processes} processes): {problem}")
    return {
        "processes": processes,
        "kills": kills,
        "during a save": during_save,
        "steps logged again": sum(len(logged) - 1 for logged in got.values()),
        "losses bit-exact": same_losses,
        "weights bit-exact": same_weights,
        "corrupt checkpoints": len(corrupt),
        "leftover temporaries": len(leftovers),
        "tampered files detected": f"{detected}/{tried}",
        "wall s (killed run)": round(time.perf_counter() - started),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=3, help="checkpoint every N steps")
    parser.add_argument("--processes", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="kill-resume-") as folder:
        rows = [soak(n, args, Path(folder), rng) for n in args.processes]
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
