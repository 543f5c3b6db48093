"""Small, fast inputs for the llmlab.data tests: a few help topics, a tokenizer trained on them."""

import functools

from llmlab.data.corpus import help_topics
from llmlab.data.tokenization import train_bpe


@functools.cache
def sample_texts() -> tuple[str, ...]:
    """About 60 KB of English prose that is on every machine with Python."""
    return tuple(doc.text for doc in help_topics()[:12])


@functools.cache
def small_bpe(vocab_size: int = 400):
    return train_bpe(sample_texts(), vocab_size)


class StandInHub:
    """A stand-in for `datasets.load_dataset(repository, config, split=..., streaming=True)`:
    it records each call and serves `texts` as rows, counting how many rows were read."""

    def __init__(self, texts, field: str = "text"):
        self.texts, self.field = list(texts), field
        self.calls: list[tuple] = []
        self.rows_read = 0

    def __call__(self, path, name=None, *, split, streaming):
        self.calls.append((path, name, split, streaming))
        return self._rows()

    def _rows(self):
        for text in self.texts:
            self.rows_read += 1
            yield {self.field: text}
