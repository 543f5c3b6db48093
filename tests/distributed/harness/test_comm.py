"""Counting the bytes of collectives: what count/drop_collectives see, against the ring formulas
(tested on their own in tests/scale/test_comm_cost.py)."""

import pytest
import torch
import torch.distributed as dist

from llmlab.distributed import launch
from llmlab.distributed.harness.comm import count_collectives, drop_collectives


def _collectives():
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((8,), float(rank + 1))
    with count_collectives() as counter:
        dist.all_reduce(x)
        dist.broadcast(torch.zeros(4), src=0)
        out = torch.empty(4)
        dist.reduce_scatter_tensor(out, torch.ones(4 * world))
    kept = torch.full((8,), float(rank + 1))
    with drop_collectives("all_reduce"):
        dist.all_reduce(kept)
    return x[0].item(), kept[0].item(), counter.by_kind(), out[0].item()


def test_count_and_drop_collectives_on_two_ranks():
    results = launch(_collectives, 2)
    for rank, (summed, kept, by_kind, reduced) in enumerate(results):
        assert summed == 3.0 and reduced == 2.0  # the collectives really ran
        assert kept == rank + 1  # a dropped all-reduce leaves the tensor as it was
        assert by_kind == {"all_reduce": 32.0, "broadcast": 8.0, "reduce_scatter": 16.0}


def test_an_all_gather_cannot_be_dropped():
    with pytest.raises(ValueError, match="all_gather"), drop_collectives("all_gather"):
        pass
