"""Samples: the same seed for every variant."""

import pytest
from helpers.evaluation import TINY

from llmlab.data.tokenization import train_bpe
from llmlab.evaluate import (
    generate_samples,
    samples_table,
)
from llmlab.models import build_model


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(["the cat sat on the mat. a dog ran in the park."] * 20, vocab_size=300)


def test_samples_use_the_same_seed_for_every_variant(tokenizer):
    same_a, same_b, other = (build_model(TINY, seed=s) for s in (0, 0, 1))
    prompts = ["the cat", "a dog"]
    rows = generate_samples({"a": same_a, "b": same_b, "other": other}, tokenizer, prompts,
                            max_new_tokens=8, seed=3)
    assert [row["prompt"] for row in rows] == prompts
    assert all(row["a"] == row["b"] for row in rows)  # equal models, equal text
    assert any(row["a"] != row["other"] for row in rows)
    again = generate_samples({"a": same_a}, tokenizer, prompts, max_new_tokens=8, seed=3)
    assert [row["a"] for row in again] == [row["a"] for row in rows]
    table = samples_table([{"prompt": "x|y", "a": "line\nbreak"}])
    assert table.splitlines()[2] == "x\\|y | line ⏎ break"
