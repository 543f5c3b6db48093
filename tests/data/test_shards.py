"""Token shards: dtype choice, round trips, and clear errors for every kind of damage."""

import json

import numpy as np
import pytest

from llmlab.data.errors import DataError
from llmlab.data.shards import (
    HEADER_BYTES,
    MAGIC,
    open_shard,
    read_header,
    read_tokens,
    shard_count,
    token_dtype,
    write_shard,
)


@pytest.mark.parametrize(
    "vocab_size, dtype",
    [(256, np.uint16), (50257, np.uint16), (65536, np.uint16), (65537, np.uint32),
     (151936, np.uint32), (2**32, np.uint32)],
)
def test_token_dtype_is_the_smallest_that_holds_every_id(vocab_size, dtype):
    assert token_dtype(vocab_size) == dtype


def test_token_dtype_rejects_impossible_vocabularies():
    with pytest.raises(ValueError, match="does not fit 32 bits"):
        token_dtype(2**32 + 1)


@pytest.mark.parametrize("vocab_size", [8192, 100_000])
def test_round_trip(tmp_path, vocab_size):
    tokens = np.random.default_rng(0).integers(0, vocab_size, size=1000)
    header = write_shard(tmp_path / "s.bin", tokens, vocab_size=vocab_size, tokenizer="abc")
    assert header.dtype == token_dtype(vocab_size).name
    assert (tmp_path / "s.bin").stat().st_size == HEADER_BYTES + header.nbytes
    again, ids = open_shard(tmp_path / "s.bin", tokenizer="abc")
    assert again == header
    np.testing.assert_array_equal(ids, tokens)


def test_read_tokens_joins_shards_in_order_as_int64_and_checks_each(tmp_path):
    first, second = np.arange(10), np.arange(100, 105)
    for name, tokens in (("a.bin", first), ("b.bin", second)):
        write_shard(tmp_path / name, tokens, vocab_size=8192, tokenizer="abc")
    ids = read_tokens([tmp_path / "a.bin", tmp_path / "b.bin"], tokenizer="abc")
    assert ids.dtype == np.int64 and ids.tolist() == [*range(10), *range(100, 105)]
    assert read_tokens([]).shape == (0,)
    with pytest.raises(DataError, match="another tokenizer"):
        read_tokens([tmp_path / "a.bin"], tokenizer="xyz")


def test_ids_outside_the_vocabulary_are_never_truncated(tmp_path):
    with pytest.raises(DataError, match="outside the vocabulary of 65,536"):
        write_shard(tmp_path / "s.bin", np.array([1, 70_000]), vocab_size=65536, tokenizer="x")
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_vocabulary_too_large_for_the_dtype_is_an_error(tmp_path):
    with pytest.raises(DataError, match="s.bin: a vocabulary of 100,000 ids needs uint32"):
        write_shard(tmp_path / "s.bin", np.array([1]), vocab_size=100_000, tokenizer="x",
                    dtype="uint16")


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "train_000.bin"
    write_shard(path, np.arange(500), vocab_size=8192, tokenizer="good")
    return path


def test_truncated_shard(shard):
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(DataError, match="train_000.bin holds 990 bytes .* truncated.*rebuild"):
        open_shard(shard)


def test_corrupted_shard(shard):
    data = bytearray(shard.read_bytes())
    data[HEADER_BYTES + 7] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(DataError, match="train_000.bin is corrupted.*rebuild"):
        open_shard(shard)
    open_shard(shard, verify=False)  # without the checksum the damage goes unnoticed


def test_shard_from_another_tokenizer(shard):
    with pytest.raises(DataError, match="made with another tokenizer \\(fingerprint good; yours"):
        open_shard(shard, tokenizer="other")


def test_not_a_shard_and_missing_shard(tmp_path):
    other = tmp_path / "notes.bin"
    other.write_bytes(b"hello" * 300)
    with pytest.raises(DataError, match="notes.bin is not an llmlab token shard"):
        read_header(other)
    with pytest.raises(DataError, match="missing.bin does not exist"):
        read_header(tmp_path / "missing.bin")


def test_a_failed_write_leaves_the_previous_shard_intact(shard, monkeypatch):
    before = shard.read_bytes()
    monkeypatch.setattr("llmlab.data.shards._header_bytes", lambda header: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        write_shard(shard, np.arange(10), vocab_size=8192, tokenizer="new")
    assert shard.read_bytes() == before
    assert [p.name for p in shard.parent.iterdir()] == [shard.name]  # no temporary file left


@pytest.mark.parametrize(
    "tokens, readers, max_tokens, expected",
    [(1000, 8, 10_000, 8), (100_000, 8, 10_000, 16), (80_001, 8, 10_000, 16), (10, 1, 3, 4)],
)
def test_shard_count_is_a_multiple_of_the_readers(tokens, readers, max_tokens, expected):
    count = shard_count(tokens, readers, max_tokens)
    assert count == expected and count % readers == 0
    assert tokens / count <= max_tokens


def edit_header(path, **fields):
    """Rewrite header fields in place (the ids stay), as a damaged or tampered file would be."""
    raw = path.read_bytes()
    header = json.loads(raw[len(MAGIC) : HEADER_BYTES].decode("utf-8"))
    text = (MAGIC + json.dumps({**header, **fields}).encode("utf-8")).ljust(HEADER_BYTES, b" ")
    path.write_bytes(text + raw[HEADER_BYTES:])


def test_a_changed_vocab_size_fails_the_checksum(shard):
    edit_header(shard, vocab_size=9192)
    assert read_header(shard).vocab_size == 9192  # the header alone looks plausible
    with pytest.raises(DataError, match="train_000.bin is corrupted"):
        open_shard(shard)


@pytest.mark.parametrize(
    "fields, message",
    [(dict(dtype="uint1X"), "dtype 'uint1X' is not one of"), (dict(dtype=16), "dtype 16"),
     (dict(tokens="500"), "tokens '500' is not a count"), (dict(format=1), "format 1")],
)
def test_a_damaged_header_field_is_a_clear_error(shard, fields, message):
    edit_header(shard, **fields)
    with pytest.raises(DataError, match=f"train_000.bin has a damaged or outdated.*{message}"):
        read_header(shard)


def test_float_ids_are_refused_not_truncated(tmp_path):
    with pytest.raises(DataError, match="s.bin: token ids must be integers, got .* float64"):
        write_shard(tmp_path / "s.bin", np.array([1.0, 2.7]), vocab_size=8192, tokenizer="x")
    assert not list(tmp_path.iterdir())  # nothing written
