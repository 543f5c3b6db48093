"""Packing documents into blocks, and the cost of padding versus packing."""

import numpy as np
import pytest

from llmlab.data.packing import pack, packing_cost, pad_to_length_cost, pad_to_longest_cost


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


@pytest.mark.parametrize("documents", [[[5, 6, 7], [8, 9]], [[4], [], [1, 2, 3]], [[9] * 6]])
def test_pack_in_one_row_is_what_transformers_flattening_collator_returns(documents):
    from transformers import DataCollatorWithFlattening

    eos_id = 0
    with_eos = [{"input_ids": [*document, eos_id]} for document in documents]
    theirs = DataCollatorWithFlattening(return_position_ids=True, return_tensors="np")(with_eos)
    length = theirs["input_ids"].shape[1]
    ours = pack(documents, block_size=length, eos_id=eos_id)
    for key in ("input_ids", "position_ids", "labels"):
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)


def test_pack_restarts_positions_at_each_document_and_row_and_pads_the_last_row():
    packed = pack([[1, 2, 3, 4, 5, 6], [7]], block_size=4, eos_id=0)
    np.testing.assert_array_equal(packed["input_ids"], [[1, 2, 3, 4], [5, 6, 0, 7], [0, 0, 0, 0]])
    np.testing.assert_array_equal(packed["position_ids"], [[0, 1, 2, 3], [0, 1, 2, 0],
                                                           [0, 0, 1, 2]])
    np.testing.assert_array_equal(packed["labels"], [[-100, 2, 3, 4], [5, 6, 0, -100],
                                                     [0, -100, -100, -100]])
    assert pack([], block_size=4, eos_id=0)["input_ids"].shape == (0, 4)
