"""Packing documents into blocks, and the cost of padding versus packing."""

import numpy as np
import pytest

from llmlab.data.packing import pack, packing_cost, pad_to_length_cost, pad_to_longest_cost


def test_pack_appends_eos_and_drops_the_incomplete_block():
    blocks = pack([[1, 2, 3], [4, 5], [6, 7, 8, 9]], block_size=4, eos_id=0)
    np.testing.assert_array_equal(blocks, [[1, 2, 3, 0], [4, 5, 0, 6], [7, 8, 9, 0]])
    assert pack([[1]], block_size=4, eos_id=0).shape == (0, 4)


def test_padding_costs():
    lengths = [2, 4, 10]
    fixed = pad_to_length_cost(lengths, seq_len=8)
    assert (fixed.slots, fixed.real, fixed.truncated) == (24, 14, 2)
    assert fixed.padding_fraction == pytest.approx(10 / 24)
    assert fixed.truncated_fraction == pytest.approx(2 / 16)
    longest = pad_to_longest_cost(lengths, seq_len=8, batch_size=2)
    assert (longest.slots, longest.real) == (2 * 4 + 1 * 8, 14)
    sorted_batches = pad_to_longest_cost([10, 2, 4, 3], seq_len=8, batch_size=2, sort=True)
    assert sorted_batches.slots == 2 * 3 + 2 * 8  # batches (2, 3) and (4, 8)
    packed = packing_cost(lengths, seq_len=8)
    assert packed.padding_fraction == 0
    assert (packed.slots, packed.truncated) == (16, 3)  # 16 + 3 eos = 19 tokens, 2 blocks
