"""The alpha-beta time of a collective over N ranks for a tensor of S bytes.

A ring algorithm cuts the tensor into N chunks and takes N-1 steps per phase, each step one
message of S/N bytes over the slowest link of the ring. The bytes a rank sends and the phases
are llmlab.scale.comm_cost's (`ring_bytes`, `PHASES`: what Lab 04 counted), so

  ring all-reduce         2 (N-1) alpha + 2 (N-1)/N S / beta   (reduce-scatter, then all-gather)
  ring reduce-scatter       (N-1) alpha +   (N-1)/N S / beta   (S: the full input)
  ring all-gather           (N-1) alpha +   (N-1)/N S / beta   (S: the full output)
  tree all-reduce    2 log2(N) alpha + 2 S / beta             (reduce up, broadcast down,
                                                               pipelined in small chunks)
  all-to-all                (N-1) alpha +   (N-1)/N S / beta   (pairwise: one message to each
                                                               other rank; S: what a rank holds)

The ring's bandwidth term hardly grows with N, its latency term does: a tree wins for small
messages on many ranks, a ring for large ones (NCCL picks between them by size).
"""

import math

from llmlab.scale.comm_cost import PHASES, ring_bytes
from llmlab.scale.links import Link, link


def _check(kind: str, nbytes: float, ranks: int) -> None:
    if kind not in PHASES:
        raise ValueError(f"unknown collective {kind!r}: use one of {tuple(PHASES)}")
    if not nbytes >= 0:
        raise ValueError(f"the tensor must have a size >= 0 bytes, got {nbytes}")
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")


def ring_seconds(kind: str, nbytes: float, ranks: int, over: str | Link) -> float:
    """alpha-beta time of a ring collective; 0 on one rank (nothing to send)."""
    _check(kind, nbytes, ranks)
    if ranks == 1:
        return 0.0
    steps = PHASES[kind] * (ranks - 1)
    return link(over).seconds(ring_bytes(kind, nbytes, ranks), messages=steps)


def tree_all_reduce_seconds(nbytes: float, ranks: int, over: str | Link) -> float:
    """alpha-beta time of a (pipelined) tree all-reduce: latency grows with log2 N, not N."""
    _check("all_reduce", nbytes, ranks)
    if ranks == 1:
        return 0.0
    return link(over).seconds(2 * nbytes, messages=2 * math.ceil(math.log2(ranks)))


def all_to_all_seconds(nbytes: float, ranks: int, over: str | Link) -> float:
    """alpha-beta time of an all-to-all with even splits: each rank keeps 1/N of its `nbytes` and
    sends the other ranks one message each (expert parallelism's dispatch and combine)."""
    if not nbytes >= 0:
        raise ValueError(f"the tensor must have a size >= 0 bytes, got {nbytes}")
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    return link(over).seconds(nbytes * (ranks - 1) / ranks, messages=ranks - 1)


def send_seconds(nbytes: float, over: str | Link) -> float:
    """One point-to-point message (a pipeline stage passing activations on)."""
    if not nbytes >= 0:
        raise ValueError(f"the message must have a size >= 0 bytes, got {nbytes}")
    return link(over).seconds(nbytes)
