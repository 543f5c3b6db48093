"""How long a checkpoint stops training: torch.distributed.checkpoint's save against async_save.

    python benchmarks/checkpoint_stall.py [--width 512] [--layers 4] [--steps 12] [--every 3]

One process trains a GPT-2 style model (AdamW, so a checkpoint holds 3x the weights) and
checkpoints its weights and optimizer states every `--every` steps, with `dcp.save` (sync) and
with `dcp.async_save` (async); llmlab.train.stall times each save call (the stall) and checks that
every checkpoint holds the state of its own step. Lab 05 runs the same measurement on a small model.
"""

import argparse
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from llmlab.tables import markdown_table
from llmlab.timing import warn_if_busy
from llmlab.train.stall import MODES, measure_stall

VOCAB, SEQ, BATCH = 8192, 128, 4


def build(width: int, layers: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=max(1, width // 64),
                        n_positions=SEQ, vocab_size=VOCAB, bos_token_id=0,
                        eos_token_id=0)
    model = GPT2LMHeadModel(config)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def train_step(model, optimizer, generator: torch.Generator) -> None:
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=generator)
    logits = model(tokens[:, :-1]).logits
    F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def run(mode: str, args, scratch: Path) -> dict:
    model, optimizer = build(args.width, args.layers)
    generator = torch.Generator().manual_seed(1)
    result = measure_stall(mode, model, optimizer, lambda: train_step(model, optimizer, generator),
                           scratch, args.steps, args.every)
    return result.row()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=3, help="checkpoint every N steps")
    args = parser.parse_args()
    warn_if_busy()
    with tempfile.TemporaryDirectory(prefix="checkpoint-stall-") as folder:
        rows = [run(mode, args, Path(folder)) for mode in MODES]
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
