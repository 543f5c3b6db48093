"""Pipeline schedules as time lines: every piece runs after its input, no stage runs two pieces
at once, and each schedule's bubble is its formula exactly (GPipe and 1F1B, interleaved 1F1B,
ZB-H1), at shapes the lab does not show; 1F1B and ZB-H1 within their memory bounds. Mistakes
caught: ZB-H1 without its owed W's (or with the wrong stages owing them), an order that waits
for itself."""

import itertools

import pytest

from llmlab.scale.schedules import (
    SCHEDULES,
    Piece,
    _zero_bubble_h1,
    bubble,
    bubble_formula,
    peak_held,
    schedule_time_line,
    stage_orders,
    time_line,
)

CASES = [  # schedule, stages, micro-batches, chunks
    *[(schedule, p, m, 1) for schedule in ("gpipe", "1f1b") for p, m in
      [(1, 3), (2, 4), (3, 5), (4, 1), (4, 6), (5, 7)]],
    *[("interleaved-1f1b", p, m, v) for p, m, v in [(2, 4, 2), (3, 6, 2), (4, 8, 3), (3, 3, 4)]],
    *[("zb-h1", p, m, 1) for p, m in [(2, 2), (3, 5), (4, 4), (4, 9), (5, 7)]],
]


def assert_valid(slots, stages, micro_batches, chunks, split):
    """Each stage runs each of its pieces once, one at a time, each after its input."""
    end = {(slot.piece.kind, slot.piece.chunk * stages + slot.stage, slot.piece.micro_batch):
           slot for slot in slots}
    kinds = "FBW" if split else "FB"
    assert len(end) == len(slots) == len(kinds) * stages * chunks * micro_batches
    last = stages * chunks - 1
    for (kind, where, i), slot in end.items():
        needs = {"F": ("F", where - 1, i) if where else None,
                 "B": ("B", where + 1, i) if where < last else ("F", where, i),
                 "W": ("B", where, i)}[kind]
        if needs:
            assert end[needs].end <= slot.start, (kind, where, i)
    for stage in range(stages):
        mine = sorted((slot.start, slot.end) for slot in slots if slot.stage == stage)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(mine))


@pytest.mark.parametrize("schedule, stages, micro_batches, chunks", CASES)
def test_each_schedule_is_valid_and_its_bubble_is_its_formula(schedule, stages, micro_batches,
                                                              chunks):
    slots = schedule_time_line(schedule, stages, micro_batches, chunks)
    assert_valid(slots, stages, micro_batches, chunks, split=schedule == "zb-h1")
    assert float(bubble(slots)) == pytest.approx(
        bubble_formula(schedule, stages, micro_batches, chunks), abs=1e-12)


def test_the_memory_each_schedule_holds():
    # GPipe holds every micro-batch; 1F1B's stage s at most p - s; ZB-H1's stages at most p,
    # the most any 1F1B stage holds (a micro-batch is held until its W).
    p, m = 4, 9
    for schedule, bound in (("gpipe", [m] * p), ("1f1b", [4, 3, 2, 1]), ("zb-h1", [4] * p)):
        slots = schedule_time_line(schedule, p, m)
        assert [peak_held(slots, stage) for stage in range(p)] == bound


def test_interleaving_trades_messages_for_bubble():
    # v chunks a stage cut the bubble about v-fold and send v times as many activations.
    one = schedule_time_line("1f1b", 4, 8)
    two = schedule_time_line("interleaved-1f1b", 4, 8, chunks=2)
    assert bubble(two) < bubble(one) / 1.5
    sends = [sum(s.piece.kind == "F" and s.stage < 3 for s in slots) for slots in (one, two)]
    assert sends[1] == 2 * sends[0]


def test_zb_h1_needs_its_owed_ws_and_the_check_sees_when_they_are_wrong():
    # Plausible wrong versions: every W at once (none owed), and the owing reversed.
    p, m = 4, 8
    formula = bubble_formula("zb-h1", p, m)
    for owed in (lambda stage: 0, lambda stage: p - 1 - stage):
        orders = [_zero_bubble_h1(stage, p, m, owed=owed(stage)) for stage in range(p)]
        slots = time_line(orders, split_backward=True)
        assert float(bubble(slots)) > formula + 0.05


def test_an_order_that_waits_for_itself_and_bad_shapes_are_refused():
    stuck = [[Piece("B", 0), Piece("F", 0)], [Piece("F", 0), Piece("B", 0)]]
    with pytest.raises(ValueError, match="deadlock"):
        time_line(stuck)
    with pytest.raises(ValueError, match="not a multiple"):
        stage_orders("interleaved-1f1b", 4, 6, chunks=2)
    with pytest.raises(ValueError, match="unknown schedule"):
        stage_orders("dualpipe", 4, 8)
    with pytest.raises(ValueError, match="at least as many micro-batches"):
        bubble_formula("zb-h1", 4, 3)
    with pytest.raises(ValueError, match="chunks are for interleaved"):
        stage_orders("1f1b", 4, 8, chunks=2)
    assert set(SCHEDULES) == {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1"}
