"""Data pipeline throughput on the built-in corpus, and whether the loaders keep up with training.

    python benchmarks/data_pipeline.py [--corpus builtin|builtin-smoke] [--repeats 3]

Measures, in one run: the raw `tokenizers` batch-encode speed; the whole pipeline (read, clean,
tokenize, write shards) and its share of the raw speed (target: at least 70%); and the batches per
second of each loader against the training steps per second of the Lab 03 smoke model (a GPT-2
shape: 4 layers, width 256, 4 heads, sequence 256, batch 8, vocabulary 8192; target: every loader
faster than training). Needs the llmlab package importable (`pip install -e .`).
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

from llmlab.data.clean import clean_documents
from llmlab.data.corpus import load_corpus
from llmlab.data.documents import total_bytes
from llmlab.data.loaders import RandomWindows, ResumableLoader, TokenStream
from llmlab.data.pipeline import DatasetSpec, PipelineReport, build_dataset, split_documents
from llmlab.data.tokenization import encode_texts, load_tokenizer, save_tokenizer, train_bpe
from llmlab.device import choose_device
from llmlab.tables import markdown_table
from llmlab.timing import time_fn

VOCAB, SEQ_LEN, BATCH = 8192, 256, 8  # the Lab 03 smoke model's vocabulary and batch shape
LOADER_BATCHES = 200
TARGET_SHARE = 0.7  # the whole pipeline's speed against raw encoding's, at least


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="builtin", help="builtin (default) or builtin-smoke")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    parser.add_argument("--device", default=None, help="for the model step: cpu, cuda, cuda:N")
    return parser.parse_args()


def raw_and_pipeline(spec: DatasetSpec, tokenizer_dir: Path, work: Path, repeats: int):
    """Best-of-`repeats` raw encode seconds and pipeline runs (each with a fresh tokenizer copy,
    so no run inherits another's warm caches), interleaved so drifting machine load hits both."""
    texts = [d.text for d in load_corpus(spec.corpus)]
    raw_seconds, runs = [], []
    for attempt in range(repeats):
        tokenizer = load_tokenizer(tokenizer_dir)
        start = time.perf_counter()
        encode_texts(tokenizer, texts)
        raw_seconds.append(time.perf_counter() - start)
        paths, report = build_dataset(spec, work / f"run-{attempt}",
                                      tokenizer=load_tokenizer(tokenizer_dir))
        runs.append((paths, report))
    paths, best = max(runs, key=lambda run: run[1].mb_per_s())
    return best.input_bytes / 1e6 / min(raw_seconds), best, paths


def endless(loader):
    """Pass after pass (a stream ends with its pass; workers restart, as at an epoch boundary)."""
    while True:
        yield from loader


def batches_per_second(loader, count: int = LOADER_BATCHES) -> float:
    """Steady-state speed: the first batch (worker start-up, first page faults) is not timed."""
    iterator = endless(loader)
    next(iterator)
    start = time.perf_counter()
    for _ in range(count):
        next(iterator)
    return count / (time.perf_counter() - start)


def training_steps_per_second(device: torch.device) -> float:
    """Forward, backward and AdamW update of the Lab 03 smoke model on random tokens."""
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=256, n_layer=4, n_head=4)
    model = GPT2LMHeadModel(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ_LEN), device=device)

    def step():
        model(input_ids=tokens, labels=tokens).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return 1 / time_fn(step, warmup=2, repeats=5, device=device).median_s


def throughput_table(raw: float, report: PipelineReport) -> str:
    """Raw encoding, each pipeline stage and the whole pipeline in MB/s; the whole pipeline's
    share of the raw speed, with its verdict."""
    rows = [{"": "raw tokenizers encode_batch_fast", "MB/s": f"{raw:.2f}", "/ raw": "",
             "verdict": ""}]
    rows += [{"": f"pipeline stage: {stage}", "MB/s": f"{speed:.2f}", "/ raw": "", "verdict": ""}
             for stage, speed in report.stage_mb_per_s().items()]
    share = report.mb_per_s() / raw
    rows.append({"": "whole pipeline", "MB/s": f"{report.mb_per_s():.2f}", "/ raw": f"{share:.2f}",
                 "verdict": "ok" if share >= TARGET_SHARE else "BELOW TARGET"})
    return markdown_table(rows, aligned=True)


def loaders_table(speeds: dict[str, float], steps: float) -> str:
    """Each loader's batches per second, as a multiple of the training steps per second."""
    rows = [{"": name, "batches/s": f"{speed:.0f}", "x training": f"{speed / steps:.0f}x",
             "verdict": "ok" if speed > steps else "BOTTLENECK"}
            for name, speed in speeds.items()]
    rows.append({"": "training step", "batches/s": f"{steps:.2f}", "x training": "", "verdict": ""})
    return markdown_table(rows, aligned=True)


def main() -> None:
    args = parse_args()
    # transformers was imported before llmlab could quieten it (imports are sorted).
    transformers.logging.set_verbosity_error()
    device = choose_device(args.device).device
    spec = DatasetSpec(args.corpus, VOCAB)
    with tempfile.TemporaryDirectory(prefix="llmlab-bench-") as tmp:
        work = Path(tmp)
        train_docs, _ = split_documents(clean_documents(load_corpus(spec.corpus))[0],
                                        spec.val_fraction, spec.seed)
        print(
            f"corpus {spec.corpus}: {total_bytes(train_docs) / 1e6:.1f} MB of training text; "
            f"training a {VOCAB}-token BPE tokenizer (not timed) ...",
            flush=True,
        )
        save_tokenizer(train_bpe((d.text for d in train_docs), VOCAB), work / "tokenizer")
        raw, report, paths = raw_and_pipeline(spec, work / "tokenizer", work, args.repeats)

        print(f"\nthroughput, MB of input text per second (best of {args.repeats}); "
              f"target: the whole pipeline at >= {TARGET_SHARE:.2f} of the raw speed")
        print(throughput_table(raw, report))

        fingerprint = paths.fingerprint
        loaders = {
            "random windows (memmap)": RandomWindows(paths.train, SEQ_LEN, BATCH,
                                                     tokenizer=fingerprint),
            "stream, 0 workers": ResumableLoader(TokenStream(paths.train, SEQ_LEN, BATCH,
                                                             tokenizer=fingerprint)),
            "stream, 2 workers": ResumableLoader(TokenStream(paths.train, SEQ_LEN, BATCH,
                                                             tokenizer=fingerprint), num_workers=2),
        }
        speeds = {name: batches_per_second(loader) for name, loader in loaders.items()}
    steps = training_steps_per_second(device)
    print(
        f"\nloaders vs one training step of the Lab 03 smoke model on {device} "
        f"(batch {BATCH} x {SEQ_LEN} tokens)"
    )
    print(loaders_table(speeds, steps))


if __name__ == "__main__":
    main()
