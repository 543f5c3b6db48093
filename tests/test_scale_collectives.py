"""alpha-beta collectives: the ring's 2(N-1)/N, bits against bytes, and Lab 04's byte formulas."""

import math

import pytest

from llmlab.models import preset
from llmlab.scale.collectives import ring_seconds, send_seconds, tree_all_reduce_seconds
from llmlab.scale.comm_cost import (
    ddp_bytes,
    dp_bytes,
    fsdp_bytes,
    ring_bytes,
    tensor_parallel_bytes,
    tp_bytes,
)
from llmlab.scale.layout import Parallel
from llmlab.scale.links import LINKS, Link, gbit_to_bytes

NO_LATENCY = Link("test", bandwidth=50e9, latency=0.0)


def test_ring_all_reduce_has_the_2_n_minus_1_over_n_factor():
    size, ranks = 1e9, 8
    assert ring_seconds("all_reduce", size, ranks, NO_LATENCY) == pytest.approx(
        2 * 7 / 8 * size / 50e9)
    wrong = size / 50e9  # forgetting the factor: one pass of the tensor
    assert not math.isclose(ring_seconds("all_reduce", size, ranks, NO_LATENCY), wrong)


def test_latency_term_counts_the_ring_steps():
    slow_start = Link("test", bandwidth=1e30, latency=1e-5)
    assert ring_seconds("all_reduce", 1.0, 16, slow_start) == pytest.approx(2 * 15 * 1e-5)
    assert ring_seconds("all_gather", 1.0, 16, slow_start) == pytest.approx(15 * 1e-5)
    assert tree_all_reduce_seconds(1.0, 16, slow_start) == pytest.approx(2 * 4 * 1e-5)


def test_tree_beats_ring_on_small_messages_and_many_ranks():
    ib = LINKS["ib-ndr"]
    assert tree_all_reduce_seconds(1e3, 1024, ib) < ring_seconds("all_reduce", 1e3, 1024, ib)
    assert tree_all_reduce_seconds(1e10, 8, ib) > ring_seconds("all_reduce", 1e10, 8, ib)


def test_network_speeds_are_bits_not_bytes():
    assert gbit_to_bytes(400) == 50e9
    assert LINKS["ib-ndr"].bandwidth == 50e9  # 400 Gb/s; 400e9 would be bits taken for bytes
    assert LINKS["nvlink4"].bandwidth == 450e9  # 900 GB/s counts both directions
    seconds = send_seconds(50e9, "ib-ndr") - LINKS["ib-ndr"].latency
    assert seconds == pytest.approx(1.0)


def test_one_rank_sends_nothing():
    assert ring_seconds("all_reduce", 1e9, 1, "ib-ndr") == 0.0


@pytest.mark.parametrize("ranks", [2, 4])
def test_dp_volumes_equal_lab04_formulas(ranks):
    # The byte counts Lab 04 measured with count_collectives (tests/test_comm.py) for DDP and
    # FSDP2, in 16-bit values: the simulator's data-parallel traffic is the same.
    params = 1_234_567
    assert dp_bytes(params, ranks, zero=0) == pytest.approx(ddp_bytes(params, ranks, 2))
    assert dp_bytes(params, ranks, zero=3) == pytest.approx(fsdp_bytes(params, ranks, 2))
    # The ZeRO paper's stage 1-2: reduce-scatter + all-gather, as many bytes as DDP.
    assert dp_bytes(params, ranks, zero=1) == pytest.approx(ddp_bytes(params, ranks, 2))
    assert ring_seconds("all_reduce", params * 2, ranks, NO_LATENCY) == pytest.approx(
        ring_bytes("all_reduce", params * 2, ranks) / NO_LATENCY.bandwidth)


@pytest.mark.parametrize("call, message", [
    (lambda: ring_seconds("broadcastt", 1, 2, "ib-ndr"), "unknown collective"),
    (lambda: ring_seconds("all_reduce", -1, 2, "ib-ndr"), ">= 0 bytes"),
    (lambda: ring_seconds("all_reduce", 1, 0, "ib-ndr"), "positive integer"),
    (lambda: ring_seconds("all_reduce", 1, 2, "infiniband"), "unknown link"),
    (lambda: Link("bad", bandwidth=0, latency=0), "positive bandwidth"),
])  # fmt: skip
def test_bad_input_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_tp_volume_equals_lab04_count():
    # tests/test_tensor_parallel.py measured 4 all-reduces of batch x seq x d_model per block
    # (2 forward, 2 backward) on the smoke model; the simulator sends the same bytes.
    shape = preset("tiny")  # 4 blocks, width 256
    layout = Parallel(dp=1, tp=2, micro_batch=2, accumulation=1, checkpointing=False)
    measured = tensor_parallel_bytes(2, 16, shape.d_model, shape.n_layer, tp=2, dtype_bytes=2)
    assert tp_bytes(shape, layout, seq=16) == measured["sent"] == 4 * 4 * 2 * 16 * 256 * 2
    # Recomputing the forward all-reduces twice more per block; each micro-batch repeats it all.
    again = Parallel(dp=1, tp=2, micro_batch=2, accumulation=3, checkpointing=True)
    assert tp_bytes(shape, again, seq=16) == 1.5 * 3 * measured["sent"]
