"""Lab 01's curation experiment: what a noisy corpus costs the model trained on it.

A clean corpus is made noisy the ways crawls are (`noisy_corpus`): boilerplate copied many times
over, edited near-copies of documents, and machine output (base64 blobs on one long line, tables
of numbers). Curating it (`curate`: Lab 01's cleaning with near-copy removal) takes the noise back
out. The same small model, from the same initial weights and drawing its training windows with
the same seed, is trained for the same number of tokens on each (`train_and_score`) and scored in
bits per byte on clean held-out text (Lab 03's measure) at several points of the run.

What the smoke model shows (benchmarks/curation_effect.py): the junk costs it dearly, a quarter of
a bit per byte after 120 steps when 55% of the raw tokens are noise, well clear of what the order
of the data alone does (up to 0.1). Duplicates alone show no consistent cost: at 1.7 passes over
the clean text +0.21 and +0.23 for two seeds but 0.00 for the third, and at 3.7 passes raw does
better by 0.00 to 0.07 (a model this small, this early, still learns from a repeated token about
what it would from a new one). Pairing matters: two seeds differ by 0.1 to 0.2 in held-out bits
per byte, so the two corpora share each seed's initial weights and window draws.
"""

import base64
import dataclasses
import math
import random
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast

from llmlab.data.clean import CleaningConfig, CleaningReport, clean_documents
from llmlab.data.dedup import edited_copy
from llmlab.data.documents import Document
from llmlab.data.loaders import RandomWindows
from llmlab.data.pipeline import encode_documents
from llmlab.data.shards import write_split
from llmlab.data.tokenization import tokenizer_fingerprint
from llmlab.evaluate import bits_per_byte, score_tokens, token_byte_lengths
from llmlab.models import ModelShape, build_model
from llmlab.train import TrainConfig, Trainer


@dataclasses.dataclass(frozen=True)
class Noise:
    """What `noisy_corpus` adds to a clean corpus, in characters, each as a share of the clean
    corpus's characters."""

    boilerplate: float = 0.3  # exact copies of a few documents, over and over
    boilerplate_documents: int = 3  # how many documents are copied
    near_copies: float = 0.3  # edited copies of documents drawn at random
    edit_share: float = 0.05  # the share of a near-copy's words changed
    junk: float = 0.2  # base64 blobs and tables of numbers, half each


def base64_blob(chars: int, rng: random.Random) -> str:
    """Random bytes in base64 on one line: an embedded file, as scraped pages carry them."""
    return base64.b64encode(rng.randbytes(chars * 3 // 4)).decode()


def number_table(chars: int, rng: random.Random) -> str:
    """Rows of numbers: a data dump, as scraped pages carry them."""
    rows, size = [], 0
    while size < chars:
        row = " ".join(f"{rng.uniform(-1000, 1000):10.3f}" for _ in range(6))
        rows.append(row)
        size += len(row) + 1
    return "\n".join(rows)


def noisy_corpus(texts: Sequence[str], noise: Noise = Noise(), seed: int = 0) -> list[str]:
    """The texts with noise added as `noise` says, shuffled in among them. Each kind of noise is
    one that Lab 01's cleaning removes: exact copies (sha256), near-copies (MinHash-LSH), base64
    on one line (line length) and number tables (share of letters)."""
    rng = random.Random(seed)
    clean_chars = sum(map(len, texts))
    out = list(texts)

    def add(budget: float, make) -> None:
        added = 0
        while added < budget * clean_chars:
            text = make()
            out.append(text)
            added += len(text)

    copied = rng.sample(range(len(texts)), min(noise.boilerplate_documents, len(texts)))
    add(noise.boilerplate, lambda: texts[rng.choice(copied)])
    add(noise.near_copies, lambda: edited_copy(rng.choice(texts), noise.edit_share, rng))
    add(noise.junk / 2, lambda: base64_blob(rng.randrange(2000, 8000), rng))
    add(noise.junk / 2, lambda: number_table(rng.randrange(2000, 8000), rng))
    rng.shuffle(out)
    return out


def curate(texts: Sequence[str], near_duplicates: float = 0.5) -> tuple[list[str], CleaningReport]:
    """Lab 01's cleaning (its default filters and exact deduplication) with near-copies removed
    too (Jaccard >= `near_duplicates`); no web-page quality rules: they remove much code."""
    docs, report = clean_documents([Document("corpus", str(i), t) for i, t in enumerate(texts)],
                                   CleaningConfig(near_duplicates=near_duplicates))
    return [d.text for d in docs], report


def write_corpus(texts: Sequence[str], tokenizer: PreTrainedTokenizerFast, folder: Path,
                 name: str) -> list[Path]:
    """The texts tokenized (each document followed by the end-of-document token) into one shard,
    `folder/name_000.bin`."""
    return write_split(encode_documents(tokenizer, list(texts)), Path(folder), name, 1,
                       vocab_size=len(tokenizer), tokenizer=tokenizer_fingerprint(tokenizer))


def train_and_score(shards: Sequence[Path], held_out: Sequence[torch.Tensor],
                    tokenizer: PreTrainedTokenizerFast, shape: ModelShape, config: TrainConfig,
                    seed: int, score_at: Sequence[int] = (),
                    data_seed: int | None = None) -> dict[int, float]:
    """A fresh model of `shape` (initialised with `seed`) trained for `config.max_steps` steps on
    random windows of the shards (drawn with `data_seed`, by default `seed`: two corpora then get
    the same initial weights and the same draws); its bits per byte on the `held_out` windows
    (`evaluate.held_out_windows`) after each step in `score_at` and after the last: {step: bpb}.
    Another `data_seed` on the same corpus measures what the order of the data alone does."""
    byte_lengths = token_byte_lengths(tokenizer)
    model = build_model(shape, seed=seed)
    scores: dict[int, float] = {}

    def score(step: int) -> None:
        scores[step] = bits_per_byte(score_tokens(model, held_out), held_out, byte_lengths)

    def maybe_score(metrics) -> None:
        if metrics.step in score_at and metrics.step != config.max_steps:
            score(metrics.step)

    train = RandomWindows(shards, config.seq_len, config.micro_batch_size,
                          tokenizer=tokenizer_fingerprint(tokenizer),
                          seed=seed if data_seed is None else data_seed)
    # The callbacks run at each logged step: log only as often as the scores need (logging reads
    # the machine's counters, which costs more than a small model's step).
    every = math.gcd(config.max_steps, *score_at)
    config = dataclasses.replace(config, progress=False, log_interval=every, seed=seed,
                                 eval_interval=10**9, out_dir=None)
    Trainer(model, config, train, callbacks=[maybe_score]).fit()
    score(config.max_steps)
    return scores
