"""Bits per byte: a held-out loss in a unit that does not depend on the tokenizer, so models with
different vocabularies (smoke and full, or two tokenizers) compare, and so does a compressor.

A model that predicts the next token with probability p can encode it in -log2(p) bits (with an
arithmetic coder), so its summed loss in bits, divided by the bytes of text it predicted, is the
size it would compress that text to. gzip and xz on the same bytes are the yardstick: a language
model that has learned something compresses its held-out text better than they do. Published
losses (nats per token of another tokenizer) convert the same way, with that tokenizer's count of
tokens on the same text.
"""

import gzip
import lzma
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tokenizers import pre_tokenizers
from transformers import PreTrainedTokenizerFast

from llmlab.data.tokenization import encode_texts
from llmlab.evaluate.next_token import TokenScores


def token_byte_lengths(tokenizer: PreTrainedTokenizerFast) -> torch.Tensor:
    """How many bytes of text each token id stands for (0 for special tokens such as the
    end-of-document marker, which are not text); for byte-level BPE tokenizers."""
    if not isinstance(tokenizer.backend_tokenizer.pre_tokenizer, pre_tokenizers.ByteLevel):
        raise ValueError(
            "token_byte_lengths needs a byte-level BPE tokenizer (as Lab 01 trains): this one "
            f"pre-tokenizes with {type(tokenizer.backend_tokenizer.pre_tokenizer).__name__}"
        )
    special = set(tokenizer.all_special_ids)
    lengths = torch.zeros(len(tokenizer), dtype=torch.long)
    for token, token_id in tokenizer.get_vocab().items():
        # Byte-level BPE spells every byte as one character of a 256-character alphabet, so a
        # token's length in characters is the number of bytes it stands for.
        lengths[token_id] = 0 if token_id in special else len(token)
    return lengths


def predicted_bytes(windows: Sequence[torch.Tensor], byte_lengths: torch.Tensor) -> int:
    """Bytes of text behind the tokens the windows predict (each window's tokens 1..)."""
    return sum(int(byte_lengths[window[1:]].sum()) for window in windows)


def bits_per_byte(
    scores: TokenScores, windows: Sequence[torch.Tensor], byte_lengths: torch.Tensor
) -> float:
    """The scored loss (score_tokens on these windows) in bits per byte of predicted text."""
    n_bytes = predicted_bytes(windows, byte_lengths)
    if n_bytes == 0:
        raise ValueError("the windows predict no text bytes (only special tokens)")
    return scores.nll_sum / math.log(2) / n_bytes


def compressor_bits_per_byte(text: bytes) -> dict[str, float]:
    """Bits per byte that gzip (-9) and xz (-9e) need for the same text."""
    if not text:
        raise ValueError("no text to compress")
    sizes = {
        "gzip -9": len(gzip.compress(text, compresslevel=9)),
        "xz -9e": len(lzma.compress(text, preset=9 | lzma.PRESET_EXTREME)),
    }
    return {name: 8 * size / len(text) for name, size in sizes.items()}


def loss_in_bits_per_byte(nats_per_token: float, n_tokens: int, n_bytes: int) -> float:
    """A mean loss in nats per token, of a tokenizer that cuts `n_bytes` of text into `n_tokens`,
    in bits per byte of that text: the summed loss (nats x tokens) over the bytes, in bits."""
    if n_tokens <= 0 or n_bytes <= 0:
        raise ValueError(f"need positive counts, got {n_tokens=} and {n_bytes=}")
    return nats_per_token * n_tokens / n_bytes / math.log(2)


@dataclass(frozen=True)
class PublishedLoss:
    """A held-out loss someone published, in nats per token of the GPT-2 tokenizer."""

    model: str
    held_out: str  # the text it was measured on
    nats_per_token: float
    source: str  # where the number is written


GPT2_SMALL_LOSSES = (
    # The red line of the loss plot in nanoGPT's GPT-2 reproduction (play.ipynb's
    # loss_baseline["124M"]): OpenAI's checkpoint on the validation shard that fineweb.py cuts
    # from the start of FineWeb-Edu's sample-10BT, the sample the full profile streams.
    PublishedLoss("OpenAI's GPT-2 small (124M) checkpoint", "FineWeb-Edu", 3.2924,
                  "github.com/karpathy/build-nanogpt, play.ipynb"),
    # "By the end of the optimization we'll get to about 3.29": llm.c's GPT-2 small trained on
    # 10B tokens of FineWeb (not the Edu subset), as quoted by the modded-nanogpt speedrun in
    # records/track_1_short/2024-10-13_llmc/README.md.
    PublishedLoss("llm.c's GPT-2 small, 10B tokens", "FineWeb", 3.29,
                  "github.com/karpathy/llm.c/discussions/481"),
)


def published_bits_per_byte(text: str, gpt2_tokenizer: PreTrainedTokenizerFast) -> list[dict]:
    """GPT2_SMALL_LOSSES in bits per byte of `text`, through the GPT-2 tokenizer's tokens per
    byte of that text: approximate where `text` is not the text they were measured on."""
    n_tokens = len(encode_texts(gpt2_tokenizer, [text])[0])
    n_bytes = len(text.encode("utf-8"))
    return [{"model": ref.model, "held out": ref.held_out,
             "nats/token": ref.nats_per_token,
             "bits/byte": f"{loss_in_bits_per_byte(ref.nats_per_token, n_tokens, n_bytes):.3f}",
             "source": ref.source} for ref in GPT2_SMALL_LOSSES]
