"""The key -> value table has distinct keys and values in their own id range, and its batches
score only the values."""

import pytest
import torch

from llmlab.data.key_values import every_fact, fact_batch, key_value_facts
from llmlab.data.packing import IGNORE_INDEX


def test_the_keys_are_distinct_and_the_ids_keep_to_their_ranges():
    table = key_value_facts(200, key_vocab=16, num_values=8, seed=3)
    keys = {tuple(fact[:2].tolist()) for fact in table.facts}
    assert len(keys) == 200
    assert table.facts[:, :2].max() < 16 and table.facts[:, 2].min() >= 16
    assert table.facts[:, 2].max() < table.vocab_size == 24
    assert table.bits == pytest.approx(200 * 3)
    assert torch.equal(table.facts, key_value_facts(200, 16, 8, seed=3).facts)


def test_more_facts_than_keys_are_refused():
    with pytest.raises(ValueError, match="16 distinct keys"):
        key_value_facts(17, key_vocab=4, num_values=8)


def test_a_batch_labels_the_values_only_and_every_fact_covers_the_table_once():
    table = key_value_facts(64, key_vocab=16, num_values=8)
    inputs, labels = fact_batch(table, rows=3, facts_per_row=4,
                                generator=torch.Generator().manual_seed(0))
    assert inputs.shape == labels.shape == (3, 12)
    assert (labels[:, 2::3] == inputs[:, 2::3]).all()
    assert (labels[:, 0::3] == IGNORE_INDEX).all() and (labels[:, 1::3] == IGNORE_INDEX).all()
    inputs, labels = every_fact(table, facts_per_row=8)
    assert torch.equal(inputs.reshape(-1, 3), table.facts)
    with pytest.raises(ValueError, match="do not divide"):
        every_fact(table, facts_per_row=5)
