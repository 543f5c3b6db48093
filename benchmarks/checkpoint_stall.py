"""How long a checkpoint stops training: torch.distributed.checkpoint's save against async_save.

    python benchmarks/checkpoint_stall.py [--width 512] [--layers 4] [--steps 12] [--every 3]

One process trains a GPT-2 style model (AdamW, so a checkpoint holds 3x the weights) and
checkpoints its weights and optimizer states every `--every` steps in each mode:
  sync   dcp.save: training waits until every byte is on disk;
  async  dcp.async_save: training waits only while the state is copied to memory (staging); a
         background thread writes it, and the next save first waits for the previous one.
The stall is the time a save call keeps the loop from its next step. Each saved checkpoint is then
loaded back and compared with a copy of the state taken when it was saved: an async checkpoint
must hold the weights of its step, not of a later one that training changed in the meantime.
"""

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict
from transformers import GPT2Config, GPT2LMHeadModel

from llmlab.bench import markdown_table, warn_if_busy
from llmlab.env import GB

VOCAB, SEQ, BATCH = 8192, 128, 4


def build(width: int, layers: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=max(1, width // 64),
                        n_positions=SEQ, vocab_size=VOCAB, bos_token_id=0,
                        eos_token_id=0)  # fmt: skip
    model = GPT2LMHeadModel(config)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def train_step(model, optimizer, generator: torch.Generator) -> None:
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=generator)
    logits = model(tokens[:, :-1]).logits
    F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def snapshot(model, optimizer) -> dict:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def matches(folder: Path, expected: dict, model, optimizer) -> bool:
    """Whether the checkpoint in `folder` holds exactly the `expected` tensors."""
    loaded = snapshot(model, optimizer)  # the right structure; dcp.load overwrites its tensors
    loaded = {k: {n: _copy(v) for n, v in d.items()} for k, d in loaded.items()}
    dcp.load(loaded, checkpoint_id=folder)
    flat_a, flat_b = _tensors(loaded), _tensors(expected)
    return flat_a.keys() == flat_b.keys() and all(torch.equal(flat_a[k], flat_b[k]) for k in flat_a)


def _copy(value):
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value.clone() if isinstance(value, torch.Tensor) else value


def _tensors(tree, prefix="") -> dict[str, torch.Tensor]:
    """Every tensor of a nested state dict, by its dotted path."""
    if not isinstance(tree, dict):
        return {prefix: tree} if isinstance(tree, torch.Tensor) else {}
    found = {}
    for key, sub in tree.items():
        found.update(_tensors(sub, f"{prefix}{key}."))
    return found


def run(mode: str, args, scratch: Path) -> dict:
    model, optimizer = build(args.width, args.layers)
    generator = torch.Generator().manual_seed(1)
    stalls, steps, saved, pending = [], [], [], None
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        begin = time.perf_counter()
        train_step(model, optimizer, generator)
        steps.append(time.perf_counter() - begin)
        if step % args.every:
            continue
        folder = scratch / f"{mode}-{step}"
        state = snapshot(model, optimizer)
        saved.append((folder, _copy(state)))  # what the checkpoint must hold (not timed)
        begin = time.perf_counter()
        if mode == "sync":
            dcp.save(state, checkpoint_id=folder)
        else:
            if pending is not None:
                pending.result()  # one save in flight at a time: its staged copy is then freed
            pending = dcp.async_save(state, checkpoint_id=folder)
        stalls.append(time.perf_counter() - begin)
    if pending is not None:
        pending.result()
    wall = time.perf_counter() - started
    intact = all(matches(folder, expected, model, optimizer) for folder, expected in saved)
    size = sum(p.stat().st_size for p in saved[-1][0].rglob("*") if p.is_file())
    return {
        "mode": mode,
        "saves": len(stalls),
        "checkpoint GB": f"{size / GB:.3f}",
        "median stall s": f"{statistics.median(stalls):.3f}",
        "max stall s": f"{max(stalls):.3f}",
        "median step s": f"{statistics.median(steps):.3f}",
        "wall s": f"{wall:.1f}",
        "checkpoints exact": intact,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=3, help="checkpoint every N steps")
    args = parser.parse_args()
    warn_if_busy()
    # One process without a process group is what this measures; DCP warns that it assumes so.
    warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
    with tempfile.TemporaryDirectory(prefix="checkpoint-stall-") as folder:
        rows = [run(mode, args, Path(folder)) for mode in ("sync", "async")]
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
