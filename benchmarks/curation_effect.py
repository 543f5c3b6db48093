"""Lab 01's curation experiment, measured: the smoke model trained on a noisy corpus (raw) and on
the same corpus curated, for the same number of tokens, over several seeds; held-out bits per byte
on clean text (the smoke dataset's validation documents) at several points of each run.

Raw is a sample of the smoke corpus's training documents with noise added
(llmlab.recipes.curation.noisy_corpus: boilerplate copied many times, near-copies, base64 and
number tables); curated is raw through Lab 01's cleaning with near-copy removal. Each seed gives
both corpora the same initial weights and the same window-sampling seed, so the difference
raw - curated is paired. One thread. Its output (the defaults, the noise floor, and each kind of
noise alone): benchmarks/measured/curation_effect.txt

    python benchmarks/curation_effect.py [--null] [--junk 0] [--fraction 0.1] [--steps 120] ...

What it found (2 layers of width 64, 120 steps of 16 x 128 tokens, a fifth of the smoke corpus's
training documents, 55% of raw's tokens noise): raw - curated +0.24 to +0.26 bits per byte at
every seed, where data order alone (--null) moves the score by 0.02 to 0.10; about 65 s for the
six runs. The effect is the junk's (alone: +0.25 to +0.35). Duplicates alone (--junk 0) are not
consistent: +0.21, +0.23 and 0.00 at 1.7 passes over the clean text, and at 3.7 passes
(--fraction 0.1) raw does better by 0.00 to 0.07.
"""

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from llmlab.data import clean, corpus, pipeline
from llmlab.evaluate import held_out_windows
from llmlab.models import preset
from llmlab.recipes import lab03_config
from llmlab.recipes.artifacts import artifacts_dir
from llmlab.recipes.curation import Noise, curate, noisy_corpus, train_and_score, write_corpus

parser = argparse.ArgumentParser()
parser.add_argument("--fraction", type=float, default=0.2, help="of the training documents")
parser.add_argument("--steps", type=int, default=120)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--lr", type=float, default=2e-3)
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--seeds", type=int, default=3)
parser.add_argument("--boilerplate", type=float, default=Noise.boilerplate)
parser.add_argument("--near-copies", type=float, default=Noise.near_copies)
parser.add_argument("--junk", type=float, default=Noise.junk)
parser.add_argument("--score-every", type=int, default=40)
parser.add_argument("--null", action="store_true",
                    help="the noise floor: curated against curated with other windows (same init)")
args = parser.parse_args()

torch.set_num_threads(1)
start = time.perf_counter()
dataset = pipeline.open_dataset(artifacts_dir() / "data-builtin-smoke-2048")
tokenizer = dataset.load_tokenizer()
docs, _ = clean.clean_documents(corpus.builtin_corpus("smoke"))
train_docs, val_docs = pipeline.split_documents(docs, val_fraction=0.05, seed=0)
sample = random.Random(0).sample(train_docs, round(len(train_docs) * args.fraction))
clean_texts = [d.text for d in sample]
noise = Noise(boilerplate=args.boilerplate, near_copies=args.near_copies, junk=args.junk)
raw = noisy_corpus(clean_texts, noise, seed=0)
curated, report = curate(raw)
print(report.table(), "\n")
scratch = tempfile.TemporaryDirectory(prefix="curation-effect-")  # removed when the script ends
folder = Path(scratch.name)
shards, tokens = {}, {}
for name, texts in (("clean", clean_texts), ("raw", raw), ("curated", curated)):
    shards[name] = write_corpus(texts, tokenizer, folder, name)
    tokens[name] = len(pipeline.encode_documents(tokenizer, texts))
held_out = held_out_windows(pipeline.encode_documents(tokenizer, [d.text for d in val_docs]), 128)
shape = preset("tiny", n_layer=args.layers, d_model=args.width, n_head=max(1, args.width // 64),
               vocab_size=len(tokenizer))
config = lab03_config("smoke", max_steps=args.steps, micro_batch_size=args.batch, lr=args.lr,
                      dtype="fp32", compile=False)
budget = args.steps * args.batch * config.seq_len
print(f"tokens: clean {tokens['clean']:,}, raw {tokens['raw']:,} "
      f"({1 - tokens['clean'] / tokens['raw']:.0%} noise), curated {tokens['curated']:,}; "
      f"budget {budget:,} ({budget / tokens['clean']:.1f} passes over the clean text); "
      f"held out {sum(w.numel() - 1 for w in held_out):,} tokens; "
      f"{args.layers} layers of width {args.width}; prepared in "
      f"{time.perf_counter() - start:.1f} s\n", flush=True)

score_at = list(range(args.score_every, args.steps, args.score_every))
results = {}
for seed in range(args.seeds):
    for name in ("raw", "curated"):
        t = time.perf_counter()
        corpus_name, data_seed = ("curated", 1000 + seed) if args.null and name == "raw" else (
            name, seed)
        results[seed, name] = train_and_score(shards[corpus_name], held_out, tokenizer, shape,
                                              config, seed, score_at, data_seed)
        print(f"seed {seed} {name:<8} " + "  ".join(f"{s}: {b:.4f}" for s, b in
                                                   results[seed, name].items())
              + f"  ({time.perf_counter() - t:.1f} s)", flush=True)

first = "curated with other windows" if args.null else "raw"
print(f"\n{first} - curated, held-out bits per byte, by step (per seed; mean, and its spread)")
for step in [*score_at, args.steps]:
    diffs = [results[s, "raw"][step] - results[s, "curated"][step] for s in range(args.seeds)]
    spread = statistics.stdev(diffs) if len(diffs) > 1 else float("nan")
    print(f"step {step:>4}: " + " ".join(f"{d:+.4f}" for d in diffs)
          + f"   mean {statistics.mean(diffs):+.4f}  sd {spread:.4f}")
print(f"\nwall time {time.perf_counter() - start:.1f} s")
