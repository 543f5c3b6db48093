"""Run under `torchrun --nproc_per_node 2`: a short DDP run with dropout and per-rank random
windows, checkpointing every 4 steps into OUT_DIR; with KILL_AT, rank 0 is killed (SIGKILL)
right after logging that step, as a crash would. Usage: ddp_resume_worker.py OUT_DIR [KILL_AT]"""

import os
import signal
import sys
from pathlib import Path

import torch
from train_fakes import RandomWindows, tiny_gpt2, token_stream

from llmlab.distributed import process_group
from llmlab.train import TrainConfig, Trainer


def main(out_dir: Path, kill_at: int) -> None:
    torch.set_num_threads(1)

    def kill(metrics):
        if metrics.step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    with process_group("gloo") as info:
        config = TrainConfig(max_steps=8, micro_batch_size=4, seq_len=16, dtype="fp32",
                             device="cpu", warmup_steps=2, lr=3e-3, log_interval=1,
                             eval_interval=100, checkpoint_interval=4, out_dir=out_dir,
                             progress=False)
        data = RandomWindows(token_stream(), 4, seed=info.rank)  # each rank its own windows
        trainer = Trainer(tiny_gpt2(dropout=0.1), config, data, callbacks=[kill])
        trainer.fit(resume=True)
        del trainer  # before the process group goes (llmlab.distributed.leave_process_group)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0)
