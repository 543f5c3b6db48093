"""Lab 01's curation experiment: the noise it adds, the curation that takes it out, and the paired
training runs it scores."""

import random

from helpers.train_fakes import tiny_tokenizer

from llmlab.data.clean import letter_fraction
from llmlab.data.dedup import jaccard, shingles
from llmlab.data.pipeline import encode_documents
from llmlab.evaluate import held_out_windows
from llmlab.models import preset
from llmlab.recipes.curation import (
    Noise,
    base64_blob,
    curate,
    noisy_corpus,
    number_table,
    train_and_score,
    write_corpus,
)
from llmlab.train import TrainConfig

WORDS = ("the model reads text and learns which word comes next from many examples of it while "
         "a corpus holds pages code and help documents in several languages").split()


def prose(n: int, seed: int = 0) -> list[str]:
    """n distinct documents of 20 lines of 10 random words: prose that Lab 01's filters keep."""
    rng = random.Random(seed)
    return ["\n".join(" ".join(rng.choice(WORDS) for _ in range(10)) for _ in range(20))
            for _ in range(n)]


def test_noisy_corpus_keeps_every_text_and_adds_each_kind_of_noise_in_its_share():
    texts = prose(100)  # 120k characters: a blob of junk (at most 8,000) is a small part
    raw = noisy_corpus(texts, Noise(boilerplate=0.5, near_copies=0.5, junk=0.4), seed=1)
    assert set(texts) <= set(raw)
    clean_chars = sum(map(len, texts))
    added = sum(map(len, raw)) - clean_chars
    assert 1.4 * clean_chars <= added <= 1.6 * clean_chars  # each kind overshoots by < 1 text
    assert raw == noisy_corpus(texts, Noise(boilerplate=0.5, near_copies=0.5, junk=0.4), seed=1)
    assert sorted(noisy_corpus(texts, Noise(0, 3, 0, 0.05, 0))) == sorted(texts)


def test_the_junk_is_what_lab_01s_filters_remove():
    rng = random.Random(0)
    assert max(map(len, base64_blob(3000, rng).split("\n"))) > 1000  # one long line
    assert letter_fraction(number_table(3000, rng)) < 0.35


def test_curation_takes_out_every_kind_of_noise_it_was_given():
    texts = prose(20)
    # Light edits (2% of words): MinHash-LSH then finds every near-copy, not most of them.
    noise = Noise(boilerplate=0.5, near_copies=0.5, edit_share=0.02, junk=0.4)
    curated, report = curate(noisy_corpus(texts, noise, seed=1))
    # One document of each group of near-copies stays (the first: the original or an edit of it).
    assert len(curated) == len(texts) == report.documents_out
    assert all(letter_fraction(t) > 0.7 for t in curated)
    # Each kept text is an original or (shuffled before it) one of its near-copies, once each.
    originals = [max(range(len(texts)), key=lambda i: jaccard(shingles(t), shingles(texts[i])))
                 for t in curated]
    assert sorted(originals) == list(range(len(texts)))


def test_paired_runs_score_at_the_steps_asked_and_repeat_exactly(tmp_path):
    tokenizer = tiny_tokenizer()
    shards = write_corpus(["def add(a, b):\n    return a + b\n"] * 50, tokenizer, tmp_path, "train")
    held_out = held_out_windows(encode_documents(tokenizer, ["def add(x, y):\n    return x"]), 8)
    shape = preset("tiny", vocab_size=len(tokenizer), context=32, n_layer=1, d_model=32, n_head=2)
    config = TrainConfig(max_steps=6, micro_batch_size=2, seq_len=16, dtype="fp32", device="cpu",
                         warmup_steps=1, lr=3e-3)
    scores = train_and_score(shards, held_out, tokenizer, shape, config, seed=0, score_at=[2, 4])
    assert list(scores) == [2, 4, 6]
    assert scores[6] < scores[2]  # it learns the one line it sees
    assert train_and_score(shards, held_out, tokenizer, shape, config, 0, [2, 4]) == scores
    assert train_and_score(shards, held_out, tokenizer, shape, config, 1, [2, 4]) != scores
    assert list(train_and_score(shards, held_out, tokenizer, shape, config, 0)) == [6]
