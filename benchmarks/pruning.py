"""Pruning at one sparsity: perplexity per method, latency of the pruned forms, time to prune.

    python benchmarks/pruning.py [--model tiny|lab03] [--sparsity 0.5] [--device cpu|cuda]

On a shared CPU, run it with OMP_NUM_THREADS=1: with more math threads than free cores the
latencies measure the other work on the machine more than the models.

--model tiny (default, seconds): a small GPT-2 trained here for a few seconds on a synthetic
Markov-chain stream (each token has a few likely successors), so perplexity has room to rise.
--model lab03: the model Lab 03 trains (llmlab.course.pretrained.trained_model(), trained now if
missing: minutes) on its own held-out shards.

Methods, all on the transformer blocks' matrices: layer-wise and global magnitude, 2:4, Wanda
(unstructured, per output), and structured (MLP neurons and attention heads removed: the model
really shrinks). Latency is one forward pass over a batch of held-out windows, every variant in
this one run, as a ratio to the dense model. The 2:4 kernel row needs CUDA with compute
capability >= 8.0 (sparse tensor cores); elsewhere it says why it is missing.
Needs the llmlab package importable (`pip install -e .` from the repository root).
"""

import argparse
import copy
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers.pytorch_utils import Conv1D

from llmlab.device import choose_device
from llmlab.evaluate import held_out_windows, latency_seconds, score_tokens
from llmlab.models import build_model, preset
from llmlab.prune import (
    apply_masks,
    attention_heads,
    global_masks,
    kept_heads,
    kept_neurons,
    layerwise_masks,
    make_permanent,
    nm_masks,
    prunable_weights,
    remove_heads,
    remove_mlp_neurons,
    sparsity_report,
    wanda_prune,
)
from llmlab.tables import markdown_table
from llmlab.timing import warn_if_busy

TINY = preset("tiny", vocab_size=256, context=64, n_layer=2, d_model=64, n_head=4)
TINY_STEPS = 120  # enough for the tiny model to learn most of the chain (a few seconds on a CPU)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "lab03"], default="tiny")
    parser.add_argument("--sparsity", type=float, default=0.5)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--windows", type=int, default=32, help="held-out windows to score")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of timed forward passes")
    return parser.parse_args()


# ---------------------------------------------------------------- models and tokens


def markov_stream(tokens: int, vocab: int, seed: int, successors: int = 4) -> np.ndarray:
    """Token ids where each token is followed by one of `successors` fixed ones (chain seed 0),
    drawn with odds 50, 25, 15, 10 %: the best perplexity is about 3.3 (e^entropy), a random
    model's about the vocabulary size."""
    chain = np.random.default_rng(0)
    following = chain.integers(0, vocab, size=(vocab, successors))
    odds = np.array([0.5, 0.25, 0.15, 0.1])[:successors]
    draws = np.random.default_rng(seed)
    choice = draws.choice(successors, size=tokens, p=odds / odds.sum())
    ids = np.empty(tokens, dtype=np.int64)
    ids[0] = 0
    for i in range(1, tokens):
        ids[i] = following[ids[i - 1], choice[i]]
    return ids


def tiny_model(device: torch.device) -> tuple[nn.Module, np.ndarray, np.ndarray]:
    """(trained model, training ids, held-out ids): AdamW on random windows of the chain."""
    train = markov_stream(200_000, TINY.vocab_size, seed=1)
    held_out = markov_stream(20_000, TINY.vocab_size, seed=2)
    model = build_model(TINY).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    stream = torch.from_numpy(train)
    for _ in range(TINY_STEPS):
        starts = torch.randint(0, len(train) - TINY.context - 1, (16,), generator=generator)
        batch = torch.stack([stream[s : s + TINY.context + 1] for s in starts]).to(device)
        logits = model(batch[:, :-1]).logits
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model.eval(), train, held_out


def lab03_model(device: torch.device) -> tuple[nn.Module, np.ndarray, np.ndarray]:
    """(Lab 03's model, its training ids, its held-out ids), from the artifacts folder."""
    from llmlab.course.pretrained import trained_model
    from llmlab.data import prepare_default_dataset
    from llmlab.data.shards import read_tokens
    from llmlab.recipes import artifacts_dir

    model, _ = trained_model("smoke")
    dataset = prepare_default_dataset(artifacts_dir(), "smoke")
    train = read_tokens(dataset.train[:1], tokenizer=dataset.fingerprint)
    return model.to(device).eval(), train, read_tokens(dataset.val, tokenizer=dataset.fingerprint)


# ---------------------------------------------------------------- the pruning methods


def structured(model: nn.Module, sparsity: float) -> nn.Module:
    """The same fraction of MLP neurons and of attention heads removed (heads in whole
    key/value groups, at least one group left)."""
    layout = attention_heads(model)
    groups = max(1, round((1 - sparsity) * layout.n_kv))
    remove_mlp_neurons(model, kept_neurons(model, sparsity))
    return remove_heads(model, kept_heads(model, groups * layout.group))


def methods(sparsity: float, calibration: list[torch.Tensor]) -> dict:
    """{name: prune(model) -> model}; each prunes the model it is given, in place."""
    return {
        "dense": lambda m: m,
        "layer-wise magnitude": lambda m: apply_masks(m, layerwise_masks(m, sparsity)),
        "global magnitude": lambda m: apply_masks(m, global_masks(m, sparsity)),
        "2:4 magnitude": lambda m: apply_masks(m, nm_masks(m, 2, 4)),
        "Wanda": lambda m: (wanda_prune(m, sparsity, calibration), m)[1],
        "structured (neurons + heads)": lambda m: structured(m, sparsity),
    }


def block_sparsity(model: nn.Module, dense_block_parameters: int) -> float:
    """Zeros or removed entries over the dense model's block matrices."""
    rows = sparsity_report(model)
    kept = rows[-1].parameters - rows[-1].zeros
    return 1 - kept / dense_block_parameters


# ---------------------------------------------------------------- 2:4 with sparse kernels


def semi_structured(model: nn.Module, ids: torch.Tensor) -> nn.Module | str:
    """A half-precision copy whose 2:4-masked matrices are stored by
    torch.sparse.to_sparse_semi_structured (the sparse tensor cores' format) and that runs on
    `ids`, or why not."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return "needs CUDA: on a CPU the 2:4 zeros are multiplied like any other number"
    if torch.cuda.get_device_capability(device) < (8, 0):
        return "needs compute capability >= 8.0 (sparse tensor cores, Ampere and later)"
    from torch.sparse import to_sparse_semi_structured

    sparse = make_permanent(apply_masks(copy.deepcopy(model), nm_masks(model, 2, 4))).half()
    try:
        for name, module in prunable_weights(sparse).items():
            owner_name, _, _ = name.rpartition(".")
            parent_name, _, child = owner_name.rpartition(".")
            linear = as_linear(module)  # Conv1D computes x @ W: the kernel wants F.linear's W
            linear.weight = nn.Parameter(to_sparse_semi_structured(linear.weight.detach()))
            setattr(sparse.get_submodule(parent_name), child, linear)
        with torch.no_grad():
            sparse(ids.to(device))
    except (RuntimeError, ValueError, NotImplementedError) as error:  # e.g. shapes it refuses
        return f"2:4 kernels refused this model: {str(error).splitlines()[0]}"
    return sparse


def as_linear(module: nn.Module) -> nn.Linear:
    if isinstance(module, nn.Linear):
        return module
    assert isinstance(module, Conv1D)
    linear = nn.Linear(*module.weight.shape, device=module.weight.device,
                       dtype=module.weight.dtype)
    with torch.no_grad():
        linear.weight.copy_(module.weight.T)
        linear.bias.copy_(module.bias)
    return linear


def alternating_latencies(forms: dict, ids: torch.Tensor, rounds: int) -> dict[str, float]:
    """{form: median seconds of one forward pass}: every form timed in every round (a warm-up
    and 3 passes each), the order rotated between rounds, so a burst of load on a shared
    machine, or being timed first after another model ran, slows every form alike."""
    names = list(forms)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(latency_seconds(forms[name], ids, repeats=3))
    return {name: statistics.median(seconds) for name, seconds in times.items()}


# ---------------------------------------------------------------- the run


def main() -> None:
    args = parse_args()
    device = choose_device(args.device).device
    warn_if_busy()
    start = time.perf_counter()
    model, train_ids, held_out = (tiny_model if args.model == "tiny" else lab03_model)(device)
    config = model.config
    context = getattr(config, "n_positions", None) or config.max_position_embeddings
    seq_len = min(128, context - 1)  # a window holds seq_len + 1 tokens
    print(f"model: {args.model} ({sum(p.numel() for p in model.parameters()):,} parameters), "
          f"ready in {time.perf_counter() - start:.1f} s on {device}")
    windows = held_out_windows(held_out, seq_len, args.windows)
    windows = [w for w in windows if w.numel() == seq_len + 1]  # one length: one timed batch
    stream = torch.from_numpy(train_ids)
    # Wanda's calibration: 4 batches of 8 x seq_len training tokens.
    calibration = [stream[i * 8 * seq_len : (i + 1) * 8 * seq_len].view(8, seq_len)
                   for i in range(4)]
    timed = torch.stack(windows[:8])
    dense_blocks = sparsity_report(model)[-1].parameters

    rows, variants = [], {}
    for name, prune in methods(args.sparsity, calibration).items():
        pruned = copy.deepcopy(model)
        began = time.perf_counter()
        pruned = prune(pruned)
        pruned_at = time.perf_counter()
        scores = score_tokens(pruned, windows)
        evaluated = time.perf_counter()
        variants[name] = pruned
        rows.append({"method": name,
                     "block sparsity": f"{block_sparsity(pruned, dense_blocks):.1%}",
                     "perplexity": f"{scores.perplexity:.2f}",
                     "accuracy": f"{scores.accuracy:.3f}",
                     "prune s": f"{pruned_at - began:.2f}",
                     "evaluate s": f"{evaluated - pruned_at:.2f}"})
    print(f"\nPerplexity at {args.sparsity:.0%} sparsity ({len(windows)} held-out windows of "
          f"{seq_len} predictions; 2:4 is always 50%)\n")
    print(markdown_table(rows))

    forms = {
        "dense": model,
        "masked (torch.nn.utils.prune hooks)": variants["layer-wise magnitude"],
        "masked, zeros folded in": make_permanent(copy.deepcopy(variants["layer-wise magnitude"])),
        "structured, smaller": variants["structured (neurons + heads)"],
    }
    kernel = semi_structured(model, timed)
    if isinstance(kernel, nn.Module):
        forms["dense fp16 (baseline for 2:4)"] = copy.deepcopy(model).half()
        forms["2:4 semi-structured fp16"] = kernel
    latencies = alternating_latencies(forms, timed, args.repeats)
    table = []
    for name, seconds in latencies.items():
        baseline = latencies["dense fp16 (baseline for 2:4)" if name.startswith("2:4") else "dense"]
        parameters = sum(p.numel() for p in forms[name].parameters())
        table.append({"form": name, "parameters": f"{parameters:,}",
                      "latency ms": f"{seconds * 1e3:.2f}",
                      "vs dense": f"{baseline / seconds:.2f}x"})
    if isinstance(kernel, str):
        table.append({"form": "2:4 semi-structured", "parameters": "-", "latency ms": "-",
                      "vs dense": f"n/a: {kernel}"})
    print(f"\nLatency: one forward pass over {tuple(timed.shape)} tokens on {device}, median of "
          f"{args.repeats} rounds that alternate the forms, in this run (vs dense: >1 is "
          "faster)\n")
    print(markdown_table(table))


if __name__ == "__main__":
    main()
