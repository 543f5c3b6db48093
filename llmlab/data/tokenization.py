"""Tokenizers trained here with the `tokenizers` library and wrapped for `transformers`.

Byte-level BPE (as GPT-2 and most LLMs): text is first turned into bytes, so every string can be
encoded and nothing is ever "unknown"; merges of frequent byte pairs become the vocabulary.
WordPiece (as BERT) for comparison: it lowercases, splits on whitespace and punctuation, and maps
characters it never saw to [UNK], so decoding does not give the text back.
"""

import hashlib
import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast

from llmlab.data.errors import DataError
from llmlab.files import replace_folder, temporary_sibling

EOS = "<|endoftext|>"  # end of document; also the pad token (packed blocks need no padding)
BYTE_ALPHABET = 256


def train_bpe(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with `vocab_size` ids (fewer if the texts allow fewer merges)."""
    if vocab_size <= BYTE_ALPHABET + 1:
        raise ValueError(f"vocab_size must exceed the 256 bytes plus {EOS}, got {vocab_size}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()  # the form the cleaning step produces
    # GPT-2's split (words, numbers, punctuation, runs of spaces) on the bytes of the text.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen or not
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, pad_token=EOS)


BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def train_wordpiece(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A BERT-style (uncased) WordPiece tokenizer; encodings start with [CLS] and end with [SEP]."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)  # also strips accents
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()  # whitespace and punctuation
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(BERT_SPECIALS), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]",
        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
    )


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerFast) -> str:
    """16 hex digits of the sha256 of the tokenizer's definition: equal only for equal tokenizers.

    Padding and truncation settings are left out: they change with each call, not the token ids.
    """
    definition = json.loads(tokenizer.backend_tokenizer.to_str())
    definition.pop("padding", None)
    definition.pop("truncation", None)
    canonical = json.dumps(definition, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: str | Path) -> Path:
    """Save to `folder` (tokenizer.json and its config), replacing it whole or not at all."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(folder)
    try:
        tokenizer.save_pretrained(tmp)
        replace_folder(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename
    return folder


def load_tokenizer(folder: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved by `save_tokenizer` (or any folder with a tokenizer.json)."""
    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file():
        raise DataError(
            f"no tokenizer in {folder} (tokenizer.json is missing): train one (train_bpe) and "
            "save it with save_tokenizer, or run prepare_default_dataset."
        )
    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def encode_texts(tokenizer: PreTrainedTokenizerFast, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, whole and without special tokens, straight from the Rust tokenizer.

    `encode_batch_fast` skips the character offsets that `tokenizer(texts)` also computes.
    """
    backend = tokenizer.backend_tokenizer
    # A call like tokenizer(..., truncation=True, max_length=8) leaves that setting on the Rust
    # tokenizer (transformers re-applies its own on every call, so clearing it is safe).
    backend.no_truncation()
    backend.no_padding()
    encodings = backend.encode_batch_fast(list(texts), add_special_tokens=False)
    return [encoding.ids for encoding in encodings]


def count_units(
    texts: Sequence[str], tokenizers: Mapping[str, PreTrainedTokenizerFast] | None = None
) -> dict[str, int]:
    """How many units the texts make at each granularity: bytes, characters, words, tokens."""
    counts = {
        "bytes": sum(len(t.encode("utf-8")) for t in texts),
        "characters": sum(len(t) for t in texts),
        "words": sum(len(t.split()) for t in texts),  # whitespace-separated
    }
    for name, tokenizer in (tokenizers or {}).items():
        counts[name] = sum(len(ids) for ids in encode_texts(tokenizer, texts))
    return counts
