"""Random key -> value facts to memorise, as token ids (no tokenizer): a task whose only rule is
the table itself, so a model scores on it by storing facts, and more parameters store more.

A fact is three tokens: two key tokens (ids below `key_vocab`) and one value token (ids from
`key_vocab` up). Rows hold several facts back to back; only the value tokens are scored (the
keys are random, nothing predicts them), so the loss and accuracy measure recall of the table.
"""

from dataclasses import dataclass

import torch

from llmlab.data.packing import IGNORE_INDEX


@dataclass(frozen=True)
class KeyValueFacts:
    facts: torch.Tensor  # (N, 3): key token, key token, value token
    key_vocab: int
    num_values: int

    @property
    def vocab_size(self) -> int:
        return self.key_vocab + self.num_values

    @property
    def bits(self) -> float:
        """What the table holds: log2(num_values) bits per fact."""
        return len(self.facts) * torch.tensor(float(self.num_values)).log2().item()


def key_value_facts(num_facts: int, key_vocab: int, num_values: int,
                    seed: int = 0) -> KeyValueFacts:
    """`num_facts` facts with distinct keys (pairs of key tokens) and values drawn uniformly."""
    if not 0 < num_facts <= key_vocab**2:
        raise ValueError(f"{key_vocab} key tokens make {key_vocab**2} distinct keys; "
                         f"asked for {num_facts} facts")
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randperm(key_vocab**2, generator=generator)[:num_facts]
    values = torch.randint(num_values, (num_facts,), generator=generator) + key_vocab
    facts = torch.stack([keys // key_vocab, keys % key_vocab, values], dim=1)
    return KeyValueFacts(facts, key_vocab, num_values)


def with_value_labels(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels) for rows of whole facts: labels are the value tokens, IGNORE_INDEX
    elsewhere (transformers shifts them: the model predicts each value from its two key tokens)."""
    labels = torch.full_like(rows, IGNORE_INDEX)
    labels[:, 2::3] = rows[:, 2::3]
    return rows, labels


def fact_batch(table: KeyValueFacts, rows: int, facts_per_row: int,
               generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A training batch: `rows` rows of `facts_per_row` facts drawn with replacement."""
    index = torch.randint(len(table.facts), (rows, facts_per_row), generator=generator)
    return with_value_labels(table.facts[index].reshape(rows, 3 * facts_per_row))


def every_fact(table: KeyValueFacts, facts_per_row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every fact once, in table order, `facts_per_row` to a row (it must divide the table)."""
    if len(table.facts) % facts_per_row:
        raise ValueError(f"{facts_per_row} facts per row do not divide {len(table.facts)} facts")
    return with_value_labels(table.facts.reshape(-1, 3 * facts_per_row))
