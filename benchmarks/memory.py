"""Predicted against measured training memory: real steps of the small presets, 7B dry runs.

    python benchmarks/memory.py [--device cpu|cuda] [--batch 4] [--seq 256]

On the CPU (or a GPU with --device cuda) it runs real AdamW steps of the tiny and small presets
and compares the planner's weights, gradients, optimizer states, activations and peak with the
tensor tracker's; then it dry-runs Llama-2 7B steps on fake tensors. Needs the llmlab package
importable (`pip install -e .` from the repository root).
"""

import argparse
import time

from llmlab.memory import TrainingSetup, dry_run, estimate_memory, measure
from llmlab.tables import markdown_table

MiB = 2**20


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    return parser.parse_args()


def compare(name: str, setup: TrainingSetup, device: str) -> list[tuple[str, float, float]]:
    """(item, predicted MiB, measured MiB) for one real training step."""
    predicted = estimate_memory(name, setup)
    measured = measure(name, setup, device=device)
    activations = predicted.items["block activations"] + predicted.items["head activations"]
    rows = [
        ("weights", predicted.items["weights"], measured.weights),
        ("gradients", predicted.items["gradients"], measured.gradients),
        ("optimizer states", predicted.items["optimizer states"], measured.optimizer_states),
        ("activations", activations, measured.activations),
        ("peak", predicted.peak, measured.peak_bytes),
    ]
    if measured.cuda_max_allocated is not None:
        rows.append(("peak (CUDA allocator)", predicted.peak, measured.cuda_max_allocated))
    return [(item, p / MiB, m / MiB) for item, p, m in rows]


def main() -> None:
    args = parse_args()
    base = TrainingSetup(batch=args.batch, seq=args.seq, dtype="fp32", optimizer="adamw")
    print(f"Real steps on {args.device}: AdamW, fp32, micro-batch {args.batch} x {args.seq}")
    rows = []
    for name in ["tiny", "small"]:
        for label, changes in [("eager", {"attention": "eager"}), ("sdpa", {}),
                               ("sdpa, checkpointing", {"checkpointing": True})]:
            for item, predicted, measured in compare(name, base.replace(**changes), args.device):
                rows.append({"preset, set-up": f"{name}, {label}", "item": item,
                             "predicted MiB": f"{predicted:.2f}", "measured MiB": f"{measured:.2f}",
                             "diff": f"{measured / predicted - 1:+.1%}"})
    print(markdown_table(rows, aligned=True))

    print("\nDry runs of Llama-2 7B on fake tensors, 1 x 2048 tokens")
    rows = []
    for label, setup in [
        ("pure bf16", TrainingSetup(batch=1, seq=2048, master_weights=False)),
        ("torch.autocast bf16", TrainingSetup(batch=1, seq=2048, fp32_grads=True)),
        ("pure bf16, checkpointing, SGD momentum",
         TrainingSetup(batch=1, seq=2048, master_weights=False, checkpointing=True,
                       optimizer="sgd-momentum")),
    ]:
        start = time.perf_counter()
        measured = dry_run("llama-7b", setup)
        seconds = time.perf_counter() - start
        predicted = estimate_memory("llama-7b", setup)
        rows.append({"set-up": label, "dry-run peak GB": f"{measured.peak_bytes / 1e9:.2f}",
                     "phase": measured.peak_phase, "predicted GB": f"{predicted.peak / 1e9:.2f}",
                     "predicted phase": predicted.peak_phase,
                     "dry run": f"{seconds:.1f} s"})
    print(markdown_table(rows, aligned=True))

if __name__ == "__main__":
    main()
