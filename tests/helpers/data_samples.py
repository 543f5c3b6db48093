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
