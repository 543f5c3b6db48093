"""Tokenizers: byte-level BPE round trips, WordPiece's losses, saving, loading, fingerprints."""

import pytest
from helpers.data_samples import sample_texts, small_bpe

from llmlab.data.clean import normalize_text
from llmlab.data.errors import DataError
from llmlab.data.tokenization import (
    EOS,
    count_units,
    encode_texts,
    load_tokenizer,
    save_tokenizer,
    tokenizer_fingerprint,
    train_bpe,
    train_wordpiece,
)

TRICKY = [
    "Plain English, with punctuation!",
    "def f(x):\n\treturn x ** 2  # tabs and spaces\n",
    "cafe\u0301 na\u00efve ﬁne Ünïcödé 日本語 🙂 \u00a0nbsp",
    "never seen: ẞ ɐ ☃ ∮ 𝔘",
    "",
]


@pytest.mark.parametrize("text", TRICKY)
def test_byte_level_bpe_round_trips_normalized_text(text):
    tokenizer = small_bpe()
    normalized = normalize_text(text)
    ids = tokenizer(normalized, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == normalized
    assert tokenizer.unk_token_id is None  # bytes cover everything: nothing is unknown


def test_bpe_round_trips_the_sample_corpus_and_compresses_it():
    tokenizer = small_bpe()
    texts = [normalize_text(t) for t in sample_texts()]
    for text, ids in zip(texts, encode_texts(tokenizer, texts), strict=True):
        assert tokenizer.decode(ids) == text
    counts = count_units(texts, {"bpe": tokenizer})
    assert counts["bytes"] >= counts["characters"] > counts["bpe"] > counts["words"]


def test_encode_texts_keeps_whole_texts_after_a_truncating_call():
    tokenizer = small_bpe()
    text = sample_texts()[0]
    tokenizer([text], truncation=True, max_length=8, padding="max_length")
    assert encode_texts(tokenizer, [text])[0] == tokenizer(text)["input_ids"]
    assert len(encode_texts(tokenizer, [text])[0]) > 8


def test_special_tokens_and_vocabulary_size():
    tokenizer = small_bpe()
    assert tokenizer.eos_token == EOS and tokenizer.pad_token == EOS
    assert tokenizer.convert_tokens_to_ids(EOS) == tokenizer.eos_token_id
    assert len(tokenizer) <= 400
    # The marker is one token, and only when written as the special token.
    assert tokenizer(EOS, add_special_tokens=False)["input_ids"] == [tokenizer.eos_token_id]
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe(["abc"], 200)


def test_wordpiece_lowercases_drops_accents_and_has_unknowns():
    tokenizer = train_wordpiece(sample_texts(), 400)
    ids = tokenizer("Café ☃")["input_ids"]
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    assert tokenizer.unk_token_id in ids  # the snowman was never seen
    assert tokenizer.decode(ids) == "[CLS] cafe [UNK] [SEP]"  # no way back to "Café ☃"


def test_save_and_load_keep_the_fingerprint(tmp_path):
    tokenizer = small_bpe()
    folder = save_tokenizer(tokenizer, tmp_path / "tok")
    loaded = load_tokenizer(folder)
    assert tokenizer_fingerprint(loaded) == tokenizer_fingerprint(tokenizer)
    assert loaded.eos_token == EOS
    text = sample_texts()[0]
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]  # no temporary folder left


def test_fingerprint_tells_tokenizers_apart_but_ignores_padding_settings():
    tokenizer = small_bpe()
    before = tokenizer_fingerprint(tokenizer)
    tokenizer(["a", "longer text"], padding="max_length", max_length=8, truncation=True)
    assert tokenizer_fingerprint(tokenizer) == before
    assert tokenizer_fingerprint(small_bpe(300)) != before


def test_loading_a_missing_tokenizer_says_what_to_do(tmp_path):
    with pytest.raises(DataError, match="tokenizer.json is missing.*train_bpe"):
        load_tokenizer(tmp_path)
