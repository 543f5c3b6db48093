"""alpha-beta collectives: the ring's 2(N-1)/N, latency against bandwidth. (The links' own figures,
bits against bytes: tests/scale/test_links.py.)"""

import math

import pytest

from llmlab.scale.collectives import (
    all_to_all_seconds,
    ring_seconds,
    send_seconds,
    tree_all_reduce_seconds,
)
from llmlab.scale.comm_cost import ring_bytes
from llmlab.scale.links import LINKS, Link

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


def test_a_send_takes_its_bytes_over_the_bandwidth_plus_the_latency():
    seconds = send_seconds(50e9, "ib-ndr") - LINKS["ib-ndr"].latency
    assert seconds == pytest.approx(1.0)


def test_one_rank_sends_nothing():
    assert ring_seconds("all_reduce", 1e9, 1, "ib-ndr") == 0.0


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_bandwidth_term_is_the_ring_bytes(ranks):
    params = 1_234_567
    assert ring_seconds("all_reduce", params * 2, ranks, NO_LATENCY) == pytest.approx(
        ring_bytes("all_reduce", params * 2, ranks) / NO_LATENCY.bandwidth)


def test_an_all_to_all_sends_one_message_to_each_other_rank():
    slow_start = Link("test", bandwidth=1e30, latency=1e-5)
    assert all_to_all_seconds(1.0, 8, slow_start) == pytest.approx(7 * 1e-5)
    # Each rank keeps its own 1/N and sends the rest: (N-1)/N S, not S, and not 2x as a ring.
    assert all_to_all_seconds(8e9, 8, NO_LATENCY) == pytest.approx(7e9 / 50e9)
    assert all_to_all_seconds(8e9, 1, NO_LATENCY) == 0.0


@pytest.mark.parametrize("call, message", [
    (lambda: ring_seconds("broadcastt", 1, 2, "ib-ndr"), "unknown collective"),
    (lambda: ring_seconds("all_reduce", -1, 2, "ib-ndr"), ">= 0 bytes"),
    (lambda: ring_seconds("all_reduce", 1, 0, "ib-ndr"), "positive integer"),
    (lambda: ring_seconds("all_reduce", 1, 2, "infiniband"), "unknown link"),
    (lambda: all_to_all_seconds(-1, 2, "ib-ndr"), ">= 0 bytes"),
    (lambda: all_to_all_seconds(1, 0, "ib-ndr"), "positive integer"),
])
def test_bad_input_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
