"""Context parallelism: ring attention (contiguous and zig-zag splits) and Ulysses compute what
causal attention over the whole sequence computes, outputs and gradients, on 2, 3 and 4 ranks;
the zig-zag split and its inverse; each rank's share of the causal attention work."""

import pytest
import torch

from llmlab.distributed import LaunchError, launch
from llmlab.distributed import context_parallel as cp
from llmlab.distributed.context_parallel import (
    attention_work,
    rank_chunks,
    shard_sequence,
    unshard_sequence,
)
from llmlab.distributed.harness.experts_and_context import context_parallel_differences

HEAD_DIM = 8


def _break(broken: str) -> None:
    """Swap a piece of the code for a plausible wrong version of it (in this rank's process)."""
    block, shift, all_to_all = cp.block_attention, cp._shift, cp.dist_fn.all_to_all
    if broken == "plain sum":  # earlier partial outputs not rescaled
        cp.merge_attention = lambda out, lse, o, s: (out + o, torch.logaddexp(lse, s))
    elif broken == "mask every block":
        cp.block_attention = lambda q, k, v, causal: block(q, k, v, causal=True)
    elif broken == "mask no block":
        cp.block_attention = lambda q, k, v, causal: block(q, k, v, causal=False)
    elif broken == "log-sum-exp not carried":  # each merge forgets the blocks before the last
        merge = cp.merge_attention
        cp.merge_attention = lambda out, lse, o, s: (merge(out, lse, o, s)[0], s)
    elif broken == "gradient sent forward":  # backward passes round the ring the same way
        cp.PassToNextRank.backward = staticmethod(lambda ctx, grad: (shift(grad, 1, None), None))
    elif broken == "all-to-all pieces reversed":
        cp.dist_fn.all_to_all = lambda outs, ins, group: all_to_all(outs, ins, group)[::-1]


def _against_full_attention(method: str, layout: str, seq_len: int, heads: int,
                            broken: str = ""):
    """This rank's largest differences from full causal attention, with `broken` made first."""
    _break(broken)
    return context_parallel_differences(method, seq_len, heads, HEAD_DIM, layout)


# Sequence lengths whose chunks are odd: 7 positions a rank (contiguous), 3 a chunk (zig-zag).
@pytest.mark.parametrize("layout,nprocs,seq_len", [
    ("contiguous", 2, 14), ("contiguous", 3, 21), ("contiguous", 4, 28),
    ("zigzag", 2, 12), ("zigzag", 3, 18), ("zigzag", 4, 24),
])
def test_ring_attention_matches_full_causal_attention_and_its_gradients(layout, nprocs, seq_len):
    for errors in launch(_against_full_attention, nprocs=nprocs,
                         args=("ring", layout, seq_len, 3), timeout_s=60):
        assert max(errors.values()) < 1e-5, errors


@pytest.mark.parametrize("broken,layout,wrong", [
    ("plain sum", "contiguous", "output"),
    ("mask every block", "contiguous", "output"),
    ("mask no block", "contiguous", "output"),
    ("log-sum-exp not carried", "contiguous", "output"),  # the last rank merges 4 blocks
    ("plain sum", "zigzag", "output"),
    ("mask every block", "zigzag", "output"),
    ("gradient sent forward", "contiguous", "k grad"),  # 4 ranks: forward is not backward
])
def test_the_ring_attention_check_catches_a_wrong_version(broken, layout, wrong):
    results = launch(_against_full_attention, nprocs=4, args=("ring", layout, 24, 3, broken),
                     timeout_s=60)
    assert max(errors[wrong] for errors in results) > 1e-2, results


@pytest.mark.parametrize("nprocs,seq_len", [(2, 14), (4, 20)])
def test_ulysses_matches_full_causal_attention_and_its_gradients(nprocs, seq_len):
    for errors in launch(_against_full_attention, nprocs=nprocs,
                         args=("ulysses", "contiguous", seq_len, 4), timeout_s=60):
        assert max(errors.values()) < 1e-5, errors


def test_the_ulysses_check_catches_the_all_to_all_pieces_in_the_wrong_order():
    results = launch(_against_full_attention, nprocs=2,
                     args=("ulysses", "contiguous", 14, 4, "all-to-all pieces reversed"),
                     timeout_s=60)
    assert max(errors["output"] for errors in results) > 1e-2, results


def test_ulysses_refuses_heads_the_ranks_do_not_divide():
    with pytest.raises(LaunchError, match="6 heads do not divide"):
        launch(_against_full_attention, nprocs=4, args=("ulysses", "contiguous", 20, 6),
               timeout_s=60)


def test_the_zigzag_split_gives_each_rank_an_early_and_a_late_chunk():
    assert [rank_chunks(r, 3, "zigzag") for r in range(3)] == [[0, 5], [1, 4], [2, 3]]
    assert [rank_chunks(r, 3) for r in range(3)] == [[0], [1], [2]]
    positions = torch.arange(8).view(8, 1)
    assert [s.flatten().tolist() for s in shard_sequence(positions, 2, "zigzag")] == [
        [0, 1, 6, 7], [2, 3, 4, 5]]


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_unshard_undoes_shard(layout, world):
    x = torch.randn(2, 3, 24, HEAD_DIM)
    assert torch.equal(unshard_sequence(shard_sequence(x, world, layout), layout), x)


def test_a_sequence_that_does_not_split_into_equal_chunks_is_refused():
    with pytest.raises(ValueError, match="14 positions do not split into 8 equal chunks"):
        shard_sequence(torch.zeros(14, HEAD_DIM), 4, "zigzag")
    with pytest.raises(ValueError, match="layout must be one of"):
        rank_chunks(0, 2, "striped")


def test_attention_work_by_hand_and_zigzag_balances_it():
    # 8 positions, 2 ranks; query p keeps keys 0..p, so p + 1 pairs.
    assert attention_work(8, 2) == [1 + 2 + 3 + 4, 5 + 6 + 7 + 8]  # [10, 26]
    assert attention_work(8, 2, "zigzag") == [1 + 2 + 7 + 8, 3 + 4 + 5 + 6]  # [18, 18]
    for world in (2, 3, 4, 8):
        seq_len = 2 * world * 16
        contiguous = attention_work(seq_len, world)
        zigzag = attention_work(seq_len, world, "zigzag")
        assert sum(contiguous) == sum(zigzag) == seq_len * (seq_len + 1) // 2  # the causal total
        assert len(set(zigzag)) == 1  # every rank the same
        assert contiguous == sorted(contiguous) and contiguous[-1] > contiguous[0]
