"""Run under `torchrun --nproc_per_node 2 --max-restarts 1`: the DDP run of
train_fakes.ddp_resume_run (dropout, per-rank random windows, a checkpoint every 4 of 8 steps,
resume=True), which SIGKILLs one of its own ranks on the first attempt only, as a crash would:

  KILL_RANK=R KILL_AFTER_STEP=N   rank R dies when it asks for step N+1's batch (step N is done)
  KILL_RANK=0 KILL_IN_SAVE=N      rank 0 dies inside checkpoint N's save, after its weights, state
                                  and meta are written but before its checksums and rename

The elastic agent (torchrun) sees the dead worker, stops the other one and starts both again with
TORCHELASTIC_RESTART_COUNT=1; they resume from the newest verified checkpoint.
Usage: elastic_worker.py OUT_DIR"""

import os
import signal
import sys
from pathlib import Path

import torch
from train_fakes import RandomWindows, ddp_resume_config, tiny_gpt2, token_stream

import llmlab.train.checkpoint as checkpoint_module
from llmlab.distributed import process_group
from llmlab.train import Trainer


def die() -> None:
    print(f"rank {os.environ['RANK']}: SIGKILL", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


class DyingWindows(RandomWindows):
    """RandomWindows that kill this process when batch `die_at` is asked for (one per step;
    0: never)."""

    def __init__(self, *args, die_at: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches, self.die_at = 0, die_at

    def next_batch(self):
        self.batches += 1
        if self.batches == self.die_at:
            die()
        return super().next_batch()


def kill_inside_save(step: int) -> None:
    """Die in the middle of checkpoint `step`'s save: its temporary folder is left half done."""
    write_checksums = checkpoint_module._write_checksums

    def dying(folder: Path) -> None:
        if folder.name.startswith(f".step_{step:07d}."):  # temporary_sibling's name
            die()
        write_checksums(folder)

    checkpoint_module._write_checksums = dying  # save_checkpoint looks it up at call time


def main(out_dir: Path) -> None:
    torch.set_num_threads(1)
    first_attempt = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"  # set by the elastic agent
    doomed = first_attempt and os.environ.get("KILL_RANK") == os.environ["RANK"]
    with process_group("gloo") as info:
        die_at = int(os.environ.get("KILL_AFTER_STEP", -1)) + 1 if doomed else 0
        data = DyingWindows(token_stream(), 4, seed=info.rank, die_at=die_at)
        if doomed and "KILL_IN_SAVE" in os.environ:
            kill_inside_save(int(os.environ["KILL_IN_SAVE"]))
        trainer = Trainer(tiny_gpt2(dropout=0.1), ddp_resume_config(out_dir), data)
        trainer.fit(resume=True)
        del trainer  # before the process group goes (llmlab.distributed.leave_process_group)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
