"""Bits per byte: byte counts per token, the loss converted, and the compressors beside it."""

import math
import random

import pytest
import torch
from torch import nn

from llmlab.data.tokenization import train_bpe, train_wordpiece
from llmlab.evaluate import held_out_windows, score_tokens
from llmlab.evaluate.bits_per_byte import (
    GPT2_SMALL_LOSSES,
    bits_per_byte,
    compressor_bits_per_byte,
    loss_in_bits_per_byte,
    predicted_bytes,
    published_bits_per_byte,
    token_byte_lengths,
)

TEXTS = ["def café(x):\n    return x  # naïve — 日本語\n", "for i in range(10):\n    print(i)\n"]


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(TEXTS * 20, vocab_size=300)


def test_byte_lengths_add_up_to_the_decoded_text(tokenizer):
    """Every token, multi-byte characters cut across tokens included, counts its own bytes; the
    end-of-document marker counts none."""
    text = "\n".join(TEXTS) + "ünïcode ✓"
    ids = tokenizer(text).input_ids + [tokenizer.eos_token_id] + tokenizer("x = 1").input_ids
    lengths = token_byte_lengths(tokenizer)
    decoded = tokenizer.decode(ids, skip_special_tokens=True).encode("utf-8")
    assert int(lengths[torch.tensor(ids)].sum()) == len(decoded)
    assert lengths[tokenizer.eos_token_id] == 0


def test_byte_lengths_refuse_a_tokenizer_that_is_not_byte_level():
    wordpiece = train_wordpiece(TEXTS * 5, vocab_size=120)
    with pytest.raises(ValueError, match="byte-level"):
        token_byte_lengths(wordpiece)


class Uniform(nn.Module):
    """Every next token equally likely: log2(vocab) bits per token, whatever the text."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab
        self.anchor = nn.Parameter(torch.zeros(1))  # score_tokens asks for the model's device

    def forward(self, ids):
        return type("Out", (), {"logits": torch.zeros(*ids.shape, self.vocab)})()


def test_a_uniform_model_needs_log2_vocab_bits_per_token(tokenizer):
    ids = tokenizer(" ".join(TEXTS * 3)).input_ids
    windows = held_out_windows(ids, 16)
    lengths = token_byte_lengths(tokenizer)
    scores = score_tokens(Uniform(len(tokenizer)), windows)
    expected = math.log2(len(tokenizer)) * scores.tokens / predicted_bytes(windows, lengths)
    assert bits_per_byte(scores, windows, lengths) == pytest.approx(expected, rel=1e-6)
    # Not per token, and not in nats: both are off by a factor.
    assert bits_per_byte(scores, windows, lengths) != pytest.approx(scores.loss / math.log(2))


def test_bits_per_byte_refuses_windows_with_no_text(tokenizer):
    eos = tokenizer.eos_token_id
    windows = [torch.tensor([eos, eos, eos])]
    scores = score_tokens(Uniform(len(tokenizer)), windows)
    with pytest.raises(ValueError, match="no text bytes"):
        bits_per_byte(scores, windows, token_byte_lengths(tokenizer))


def test_compressors_find_repetition_and_not_noise():
    repeated = b"def f(x):\n    return x\n" * 200
    noise = random.Random(0).randbytes(4000)
    assert set(compressor_bits_per_byte(repeated)) == {"gzip -9", "xz -9e"}
    assert all(bits < 0.5 for bits in compressor_bits_per_byte(repeated).values())
    assert all(bits > 7.9 for bits in compressor_bits_per_byte(noise).values())
    with pytest.raises(ValueError, match="no text"):
        compressor_bits_per_byte(b"")


def test_a_loss_per_token_in_bits_per_byte():
    """ln 2 nats per token is 1 bit per token; 4 tokens over 8 bytes is half a bit per byte.
    Fails if nats are taken for bits or tokens per byte is inverted."""
    assert loss_in_bits_per_byte(math.log(2), 10, 10) == pytest.approx(1.0)
    assert loss_in_bits_per_byte(math.log(2), 4, 8) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="positive counts"):
        loss_in_bits_per_byte(3.0, 0, 10)


def test_published_losses_convert_with_the_tokenizers_own_count_on_this_text(tokenizer):
    """A stand-in byte-level BPE in place of GPT-2's: each published loss x its tokens on the text
    / the text's UTF-8 bytes / ln 2. Fails if characters are counted for bytes (the text has
    multi-byte ones) or the end-of-document token is added to the count."""
    text = "".join(TEXTS) * 3
    n_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    n_bytes = len(text.encode("utf-8"))
    assert n_bytes > len(text)
    rows = published_bits_per_byte(text, tokenizer)
    assert [row["nats/token"] for row in rows] == [ref.nats_per_token for ref in GPT2_SMALL_LOSSES]
    for row, ref in zip(rows, GPT2_SMALL_LOSSES, strict=True):
        assert float(row["bits/byte"]) == pytest.approx(
            ref.nats_per_token * n_tokens / n_bytes / math.log(2), abs=5e-4)
        assert row["source"] == ref.source and "github.com/karpathy/" in ref.source
