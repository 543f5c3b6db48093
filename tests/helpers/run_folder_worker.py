"""A run that holds its folder: it trains the tiny model 3 steps in OUT_DIR with a checkpoint at
every step, and stops in the middle of checkpoint 2's save (its temporary folder written, its
checksums and rename not yet) to create OUT_DIR/holding, then waits there until OUT_DIR/go
exists, and finishes. What a second run meets in the folder of a run that is writing a
checkpoint. Usage: run_folder_worker.py OUT_DIR"""

import sys
import time
from pathlib import Path

import torch
from train_fakes import RandomWindows, tiny_gpt2, token_stream

import llmlab.train.checkpoint as checkpoint_module
from llmlab.train import TrainConfig, Trainer

WAIT_LIMIT_S = 300  # a test that never says go must not leave this process behind for ever


def pause_inside_save(step: int, out_dir: Path) -> None:
    write_checksums = checkpoint_module._write_checksums

    def paused(folder: Path) -> None:
        if folder.name.startswith(f".step_{step:07d}."):  # temporary_sibling's name
            (out_dir / "holding").touch()
            waited = 0.0
            while not (out_dir / "go").exists():
                if waited > WAIT_LIMIT_S:
                    sys.exit("nobody said go")
                time.sleep(0.05)
                waited += 0.05
        write_checksums(folder)

    checkpoint_module._write_checksums = paused  # save_checkpoint looks it up at call time


def main(out_dir: Path) -> None:
    torch.set_num_threads(1)
    pause_inside_save(2, out_dir)
    config = TrainConfig(max_steps=3, micro_batch_size=4, seq_len=16, dtype="fp32", device="cpu",
                         warmup_steps=1, log_interval=1, eval_interval=100, checkpoint_interval=1,
                         out_dir=out_dir, progress=False)
    Trainer(tiny_gpt2(), config, RandomWindows(token_stream(), 4)).fit(resume=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
