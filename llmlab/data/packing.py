"""Fixed-length batches from documents of every length: padding versus packing, and what each
costs in wasted compute (padding) and lost text (truncation)."""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

IGNORE_INDEX = -100  # the label the loss skips (PyTorch's and transformers' convention)


def pack(documents: Sequence[Sequence[int]], block_size: int, eos_id: int) -> dict[str, np.ndarray]:
    """Documents end to end, each followed by `eos_id`, cut into rows of `block_size` tokens;
    the last row is padded with `eos_id`, so no token is dropped. Each array: (rows, block_size).

    - `position_ids`: a token's place in its document, restarting at 0 where a document or a row
      begins (attention reaches neither the previous document nor the previous row);
    - `labels`: the tokens as transformers wants them (the model shifts them): -100 on the first
      token of each document, which nothing in its own document comes before, and on padding.
    With one row, this is what transformers' DataCollatorWithFlattening returns.
    """
    ids, labels, starts = [], [], []
    for document in documents:
        tokens = [*document, eos_id]
        starts.append(len(ids))
        ids += tokens
        labels += [IGNORE_INDEX, *tokens[1:]]
    rows = -(-len(ids) // block_size)
    padding = rows * block_size - len(ids)
    starts.append(len(ids))  # the padding is a segment of its own
    ids += [eos_id] * padding
    labels += [IGNORE_INDEX] * padding
    index = np.arange(len(ids))
    begins = np.zeros(len(ids), dtype=bool)
    begins[[start for start in starts if start < len(ids)]] = True
    begins[::block_size] = True
    positions = index - np.maximum.accumulate(np.where(begins, index, 0))
    return {name: np.array(values, dtype=np.int64).reshape(rows, block_size)
            for name, values in [("input_ids", ids), ("position_ids", positions),
                                 ("labels", labels)]}


@dataclass(frozen=True)
class BatchingCost:
    """What one way of making fixed-length rows costs on a corpus."""

    strategy: str
    seq_len: int
    slots: int  # token positions computed (rows x seq_len)
    real: int  # positions holding a real token
    truncated: int  # tokens of the documents that no row holds

    @property
    def padding_fraction(self) -> float:
        """Share of the computed positions that are padding (masked out, wasted)."""
        return 1 - self.real / self.slots if self.slots else 0.0

    @property
    def truncated_fraction(self) -> float:
        """Share of the corpus's tokens that never reach the model."""
        return self.truncated / (self.real + self.truncated)


def pad_to_length_cost(lengths: Sequence[int], seq_len: int) -> BatchingCost:
    """One row per document, padded to `seq_len` or truncated to it (padding='max_length')."""
    lengths = np.asarray(lengths)
    real = int(np.minimum(lengths, seq_len).sum())
    return BatchingCost("pad to max_length", seq_len, len(lengths) * seq_len, real,
                        int(lengths.sum()) - real)


def pad_to_longest_cost(
    lengths: Sequence[int], seq_len: int, batch_size: int, sort: bool = False
) -> BatchingCost:
    """Rows padded to the longest document of their batch (padding='longest'), at most seq_len.

    Batches take the documents in corpus order, or sorted by length (`sort=True`, "bucketing":
    similar lengths share a batch, so little padding is needed).
    """
    lengths = np.asarray(lengths)
    kept = np.minimum(np.sort(lengths) if sort else lengths, seq_len)
    slots = sum(
        len(batch) * int(batch.max())
        for batch in (kept[i : i + batch_size] for i in range(0, len(kept), batch_size))
    )
    strategy = "pad to longest, sorted" if sort else "pad to longest in batch"
    return BatchingCost(strategy, seq_len, slots, int(kept.sum()), int(lengths.sum() - kept.sum()))


def packing_cost(lengths: Sequence[int], seq_len: int) -> BatchingCost:
    """Documents packed end to end with an end-of-document token; only the last part-block is
    dropped. The end-of-document tokens count as real: the model learns where documents end."""
    stream = int(np.sum(lengths)) + len(lengths)
    blocks = stream // seq_len
    return BatchingCost("pack into blocks", seq_len, blocks * seq_len, blocks * seq_len,
                        stream - blocks * seq_len)
