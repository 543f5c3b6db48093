"""Pipeline schedules as time lines: which stage runs which piece of work, and when.

A pipeline of p stages trains m micro-batches a step. A schedule is the order in which each
stage runs its pieces of work; the time line follows from the orders alone: a piece starts when
its stage is free and its input is ready (`time_line`). The pieces, in time units:

- F, the forward of a micro-batch through the stage's layers: 1 unit;
- B, the backward: 2 units (the input's gradient and the weights' gradient, each about a
  forward), unless the schedule splits it into B, the input's gradient alone (1 unit: the
  previous stage waits only for this), and W, the weights' gradient (1 unit, at any later time).

With v chunks per stage (interleaved), a stage holds v separate runs of layers, each 1/v of its
share, and a chunk's pieces take 1/v of those units. Messages between stages take no time here.

The schedules (their idle share of a step, the bubble, with every stage as fast):
- GPipe (Huang et al. 2019): all forwards, then all backwards. (p - 1) / (m + p - 1);
- 1F1B (Narayanan et al. 2019): after p - 1 - s warm-up forwards, stage s alternates one forward
  and one backward, so it holds at most p - s micro-batches' activations. The same bubble;
- interleaved 1F1B (Narayanan et al. 2021): v chunks per stage, the pipe filled v times faster.
  (p - 1) / (v m + p - 1), for more messages (v times as many);
- ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): 1F1B with B split from W, stage s
  keeping s W's for the drain, where 1F1B idles; each stage holds at most p micro-batches, the
  most 1F1B's first stage holds. Each stage's idle time falls from (p - 1) x (F + B + W) to
  (p - 1) x (F + B - W): (p - 1) / (3 m + p - 1).
"""

from dataclasses import dataclass
from fractions import Fraction

from llmlab.scale.comm_cost import bubble_fraction

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1")


@dataclass(frozen=True)
class Piece:
    kind: str  # "F", "B" or "W"
    micro_batch: int
    chunk: int = 0  # which of the stage's chunks (interleaved schedules)


@dataclass(frozen=True)
class Slot:
    stage: int
    piece: Piece
    start: Fraction
    end: Fraction


def stage_orders(schedule: str, stages: int, micro_batches: int,
                 chunks: int = 1) -> list[list[Piece]]:
    """Each stage's pieces of work, in the order the schedule runs them."""
    _check(schedule, stages, micro_batches, chunks)
    if schedule == "gpipe":
        return [[Piece("F", i) for i in range(micro_batches)]
                + [Piece("B", i) for i in range(micro_batches)] for _ in range(stages)]
    if schedule == "1f1b":
        return [_one_forward_one_backward(
            [Piece("F", i) for i in range(micro_batches)],
            [Piece("B", i) for i in range(micro_batches)], warm_up=stages - 1 - stage)
            for stage in range(stages)]
    if schedule == "interleaved-1f1b":
        return [_interleaved(stage, stages, micro_batches, chunks) for stage in range(stages)]
    return [_zero_bubble_h1(stage, stages, micro_batches, owed=stage) for stage in range(stages)]


def _one_forward_one_backward(forwards: list[Piece], backwards: list[Piece],
                              warm_up: int) -> list[Piece]:
    """`warm_up` forwards, then one forward and one backward in turn, then the backwards left."""
    warm_up = min(warm_up, len(forwards))
    order = forwards[:warm_up]
    for forward, backward in zip(forwards[warm_up:], backwards, strict=False):
        order += [forward, backward]
    return order + backwards[len(forwards) - warm_up:]


def _interleaved(stage: int, stages: int, micro_batches: int, chunks: int) -> list[Piece]:
    """Megatron-LM's order: micro-batches in groups of `stages`, each group through chunk 0,
    then chunk 1, ... (the backwards through the chunks in reverse); stage s warms up with
    2 (p - 1 - s) + (v - 1) p forwards, then alternates."""
    def piece(kind: str, k: int) -> Piece:
        group, chunk = divmod(k, stages * chunks)
        chunk //= stages
        return Piece(kind, group * stages + k % stages,
                     chunk if kind == "F" else chunks - 1 - chunk)

    total = micro_batches * chunks
    return _one_forward_one_backward([piece("F", k) for k in range(total)],
                                     [piece("B", k) for k in range(total)],
                                     warm_up=2 * (stages - 1 - stage) + (chunks - 1) * stages)


def _zero_bubble_h1(stage: int, stages: int, micro_batches: int, owed: int) -> list[Piece]:
    """1F1B's order with each B followed by a W, except that the stage keeps `owed` W's for
    after its last B. ZB-H1 has stage s owe s: they then run where 1F1B's stage idles waiting
    for the backwards to come back, and stage s holds at most p micro-batches (a micro-batch is
    held until its W): the most any 1F1B stage holds, its first's."""
    warm_up = min(stages - stage, micro_batches)
    order = [Piece("F", i) for i in range(warm_up)]
    waiting: list[int] = []  # the micro-batches whose W is still to run
    for backward in range(micro_batches):
        order.append(Piece("B", backward))
        waiting.append(backward)
        if len(waiting) > owed:
            order.append(Piece("W", waiting.pop(0)))
        if warm_up + backward < micro_batches:
            order.append(Piece("F", warm_up + backward))
    return order + [Piece("W", number) for number in waiting]


def time_line(orders: list[list[Piece]], chunks: int = 1,
              split_backward: bool = False) -> list[Slot]:
    """When each piece runs, from the stages' orders: a piece starts when its stage has ended
    the piece before it and its input is ready (the forward of the layers before it, or the
    backward of the layers after it). Raises ValueError when the orders deadlock."""
    stages = len(orders)
    units = {"F": Fraction(1, chunks), "B": Fraction(1 if split_backward else 2, chunks),
             "W": Fraction(1, chunks)}
    last = stages * chunks - 1  # the last virtual stage: layers run chunk by chunk, stage by stage
    ends: dict[tuple[str, int, int], Fraction] = {}  # (kind, virtual stage, micro-batch) -> end
    free, next_piece, slots = [Fraction(0)] * stages, [0] * stages, []
    while any(next_piece[s] < len(orders[s]) for s in range(stages)):
        moved = False
        for stage in range(stages):
            if next_piece[stage] == len(orders[stage]):
                continue
            piece = orders[stage][next_piece[stage]]
            where = piece.chunk * stages + stage
            needs = {"F": ("F", where - 1) if where > 0 else None,
                     "B": ("B", where + 1) if where < last else ("F", where),
                     "W": ("B", where)}[piece.kind]
            if needs is not None and (needs[0], needs[1], piece.micro_batch) not in ends:
                continue
            ready = ends[(needs[0], needs[1], piece.micro_batch)] if needs else Fraction(0)
            start = max(free[stage], ready)
            end = start + units[piece.kind]
            ends[(piece.kind, where, piece.micro_batch)] = free[stage] = end
            slots.append(Slot(stage, piece, start, end))
            next_piece[stage] += 1
            moved = True
        if not moved:
            raise ValueError("the stages' orders deadlock: each waits for a piece another "
                             "has not run")
    return slots


def schedule_time_line(schedule: str, stages: int, micro_batches: int,
                       chunks: int = 1) -> list[Slot]:
    """The time line of a schedule (see the module docstring), in units of one forward."""
    orders = stage_orders(schedule, stages, micro_batches, chunks)
    return time_line(orders, chunks if schedule == "interleaved-1f1b" else 1,
                     split_backward=schedule == "zb-h1")


def bubble(slots: list[Slot]) -> Fraction:
    """The idle share of the step: stage-time not working, over stages x the step's length."""
    stages = 1 + max(slot.stage for slot in slots)
    length = max(slot.end for slot in slots)
    busy = sum(slot.end - slot.start for slot in slots)
    return 1 - busy / (stages * length)


def bubble_formula(schedule: str, stages: int, micro_batches: int, chunks: int = 1) -> float:
    """The bubble each schedule is known for (module docstring): 1F1B's, with the pipe carrying
    v m micro-batches (interleaved) or 3 m (ZB-H1: of F + B + W, only one unit a stage idles;
    with m >= p, as the paper's, since fewer never fill the pipe's steady state)."""
    _check(schedule, stages, micro_batches, chunks)
    if schedule == "zb-h1" and micro_batches < stages:
        raise ValueError(f"ZB-H1's bubble formula needs at least as many micro-batches as "
                         f"stages ({stages}), got {micro_batches}")
    carried = {"gpipe": micro_batches, "1f1b": micro_batches,
               "interleaved-1f1b": chunks * micro_batches, "zb-h1": 3 * micro_batches}[schedule]
    return bubble_fraction(stages, carried)


def peak_held(slots: list[Slot], stage: int) -> int:
    """The most forwards whose activations the stage holds at once (with v chunks, each is 1/v
    of the stage's layers): from the end of a forward to the end of the piece that frees them,
    its backward (or, split, its W). A piece that frees counts before one that starts at once."""
    frees = "W" if any(slot.piece.kind == "W" for slot in slots) else "B"
    events = sorted((slot.end, +1 if slot.piece.kind == "F" else -1)
                    for slot in slots if slot.stage == stage and slot.piece.kind in ("F", frees))
    held = peak = 0
    for _, change in events:
        held += change
        peak = max(peak, held)
    return peak


def _check(schedule: str, stages: int, micro_batches: int, chunks: int) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: use one of {SCHEDULES}")
    if stages < 1 or micro_batches < 1 or chunks < 1:
        raise ValueError(f"stages, micro-batches and chunks must be at least 1, got {stages}, "
                         f"{micro_batches} and {chunks}")
    if schedule == "interleaved-1f1b" and micro_batches % stages:
        raise ValueError(f"interleaved 1F1B sends micro-batches round in groups of the {stages} "
                         f"stages: {micro_batches} micro-batches is not a multiple")
    if chunks > 1 and schedule != "interleaved-1f1b":
        raise ValueError(f"{schedule} runs one chunk per stage; chunks are for interleaved-1f1b")
