"""Loaders: random memmap windows, and the streaming dataset's split across ranks and workers
(no overlap, full coverage) and its exact resume."""

import json
from collections import Counter

import numpy as np
import pytest
import torch

from llmlab.data.errors import DataError
from llmlab.data.loaders import (
    RandomWindows,
    ResumableLoader,
    TokenStream,
    shards_for_reader,
)
from llmlab.data.shards import write_shard

SEQ_LEN = 8
SHARD_BASE = 1000  # shard i holds the ids i*1000, i*1000 + 1, ...: every token says where it is


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    paths = []
    for i in range(8):
        path = folder / f"train_{i:03d}.bin"
        write_shard(path, SHARD_BASE * i + np.arange(60 + 7 * i), vocab_size=2**14, tokenizer="t")
        paths.append(path)
    return paths


def expected_targets(count: int) -> Counter:
    """Each token that is a target once: tokens 1 .. windows * SEQ_LEN of every shard."""
    targets = Counter()
    for i in range(count):
        windows = (60 + 7 * i - 1) // SEQ_LEN
        targets.update(SHARD_BASE * i + np.arange(1, windows * SEQ_LEN + 1))
    return targets


@pytest.mark.parametrize(
    "num_shards, world_size, num_workers", [(8, 1, 1), (8, 1, 3), (8, 2, 3), (6, 2, 2), (8, 4, 2)]
)
def test_shards_for_reader_split_without_overlap_and_equal_per_rank(
    num_shards, world_size, num_workers
):
    owned = {
        (rank, worker): shards_for_reader(num_shards, rank, world_size, worker, num_workers)
        for rank in range(world_size)
        for worker in range(num_workers)
    }
    flat = [s for shard_list in owned.values() for s in shard_list]
    assert sorted(flat) == list(range(num_shards))  # all, each once
    per_rank = [sum(len(owned[rank, w]) for w in range(num_workers)) for rank in range(world_size)]
    assert len(set(per_rank)) == 1  # equal shares: no rank runs extra steps the others never join


@pytest.mark.parametrize("world_size, num_workers", [(1, 0), (2, 0), (2, 2), (4, 2)])
def test_ranks_and_workers_read_every_window_exactly_once(shards, world_size, num_workers):
    seen = Counter()
    for rank in range(world_size):
        stream = TokenStream(shards, SEQ_LEN, batch_size=1, rank=rank, world_size=world_size,
                             tokenizer="t")
        for x, y in ResumableLoader(stream, num_workers=num_workers):
            assert x.shape == y.shape == (1, SEQ_LEN) and x.dtype == torch.int64
            assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
            seen.update(y.flatten().tolist())
    assert seen == expected_targets(len(shards))  # full coverage, no token twice


def _by_shard(batches):
    """Each batch's labels, grouped by the shard (hence the reader) they came from, in order."""
    groups = {}
    for _, y in batches:
        groups.setdefault(int(y[0, 0]) // SHARD_BASE, []).append(y.tolist())
    return groups


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_continues_every_reader_exactly_where_it_stopped(shards, num_workers):
    def loader():
        return ResumableLoader(TokenStream(shards, SEQ_LEN, batch_size=2), num_workers=num_workers)

    full = list(loader())
    first = loader()
    taken = []
    for batch in first:
        taken.append(batch)
        if len(taken) == 5:
            break
    state = json.loads(json.dumps(first.state_dict()))  # as a checkpoint stores it
    second = loader()
    second.load_state_dict(state)
    rest = list(second)
    assert len(taken) + len(rest) == len(full)
    assert _by_shard(taken + rest) == _by_shard(full)
    assert second.state_dict()["position"] == {}  # a full pass resets the position


def test_resume_needs_the_same_split(shards):
    saved = ResumableLoader(TokenStream(shards, SEQ_LEN, 2), num_workers=2).state_dict()
    other = ResumableLoader(TokenStream(shards, SEQ_LEN, 2), num_workers=0)
    with pytest.raises(DataError, match="num_workers=2, this one has 0"):
        other.load_state_dict(saved)


def test_shards_must_divide_among_ranks(shards):
    with pytest.raises(DataError, match="8 shards cannot be shared equally by 3 ranks"):
        TokenStream(shards, SEQ_LEN, 2, rank=0, world_size=3)


def test_stream_checks_the_tokenizer_when_it_opens_a_shard(shards):
    stream = TokenStream(shards, SEQ_LEN, 2, tokenizer="other")
    with pytest.raises(DataError, match="made with another tokenizer"):
        next(iter(stream))


def test_random_windows_are_contiguous_and_resumable(shards):
    loader = RandomWindows(shards, SEQ_LEN, batch_size=4, tokenizer="t", seed=1)
    x, y = loader.next_batch()
    assert x.shape == y.shape == (4, SEQ_LEN) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.all(y - x == 1)  # one window never spans two shards
    state = loader.state_dict()
    expected = loader.next_batch()
    loader.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(loader.next_batch(), expected, strict=True))


def test_random_windows_check_the_tokenizer(shards):
    with pytest.raises(DataError, match="made with another tokenizer"):
        RandomWindows(shards, SEQ_LEN, 2, tokenizer="other")


@pytest.mark.parametrize("loader", [RandomWindows, TokenStream])
@pytest.mark.parametrize("seq_len, batch_size, field", [(0, 2, "seq_len"), (8, 0, "batch_size")])
def test_empty_windows_or_batches_are_refused(shards, loader, seq_len, batch_size, field):
    with pytest.raises(ValueError, match=f"{field} must be at least 1, got 0"):
        loader(shards, seq_len, batch_size)


def test_a_seq_len_longer_than_every_shard_is_an_error_not_an_empty_stream(shards):
    with pytest.raises(DataError, match=r"0 window\(s\) of seq_len \+ 1 = 501 tokens.*109 tokens"):
        TokenStream(shards, 500, 2)
    TokenStream(shards, 100, 2)  # the shards of 102 and 109 tokens give one window each: a batch
