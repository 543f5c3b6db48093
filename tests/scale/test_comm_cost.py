"""The planner's communication formulas: ring bytes, bytes per DP strategy, TP bytes, the bubble.

The ranks' code checks its measured bytes against these: tests/distributed/harness/test_comm.py
(DDP, ZeRO-1, FSDP2) and tests/distributed/test_tensor_parallel.py (TP)."""

import pytest

from llmlab.models import preset
from llmlab.scale.comm_cost import (
    bubble_fraction,
    ddp_bytes,
    dp_bytes,
    fsdp_bytes,
    ring_bytes,
    tensor_parallel_bytes,
    tp_bytes,
    zero1_bytes,
)
from llmlab.scale.layout import Parallel


def test_ring_formulas():
    assert ring_bytes("all_reduce", 1000, 4) == 1500  # 2 (N-1)/N S
    assert ring_bytes("all_gather", 1000, 4) == ring_bytes("reduce_scatter", 1000, 4) == 750
    assert ring_bytes("all_reduce", 1000, 1) == 0  # alone, nothing to send
    assert ddp_bytes(10, 2) == 40
    assert fsdp_bytes(10, 2) == zero1_bytes(10, 2) == 1.5 * ddp_bytes(10, 2)


@pytest.mark.parametrize("ranks", [2, 4])
def test_dp_volumes_equal_lab04_formulas(ranks):
    # The byte counts Lab 04 measured with count_collectives
    # (tests/distributed/harness/test_comm.py) for DDP and FSDP2, in 16-bit values: the
    # simulator's data-parallel traffic is the same.
    params = 1_234_567
    assert dp_bytes(params, ranks, zero=0) == pytest.approx(ddp_bytes(params, ranks, 2))
    assert dp_bytes(params, ranks, zero=3) == pytest.approx(fsdp_bytes(params, ranks, 2))
    # The ZeRO paper's stage 1-2: reduce-scatter + all-gather, as many bytes as DDP.
    assert dp_bytes(params, ranks, zero=1) == pytest.approx(ddp_bytes(params, ranks, 2))


def test_tp_volume_equals_lab04_count():
    # tests/distributed/test_tensor_parallel.py measured 4 all-reduces of batch x seq x d_model
    # per block (2 forward, 2 backward) on the smoke model; the simulator sends the same bytes.
    shape = preset("tiny")  # 4 blocks, width 256
    layout = Parallel(dp=1, tp=2, micro_batch=2, accumulation=1, checkpointing=False)
    measured = tensor_parallel_bytes(2, 16, shape.d_model, shape.n_layer, tp=2, dtype_bytes=2)
    assert tp_bytes(shape, layout, seq=16) == measured["sent"] == 4 * 4 * 2 * 16 * 256 * 2
    # Recomputing the forward all-reduces twice more per block; each micro-batch repeats it all.
    again = Parallel(dp=1, tp=2, micro_batch=2, accumulation=3, checkpointing=True)
    assert tp_bytes(shape, again, seq=16) == 1.5 * 3 * measured["sent"]


def test_bubble_formula():
    assert bubble_fraction(2, 1) == 0.5
    assert bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert bubble_fraction(1, 8) == 0  # one stage never waits
