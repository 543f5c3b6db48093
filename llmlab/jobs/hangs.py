"""Hangs: which rank never reached which collective.

A collective returns only when every rank of its group has called it, so one rank that skips it
(a data-dependent branch, a crash in a thread, an endless loop) leaves the others waiting until
the group's timeout (`init_process_group(timeout=...)`). What each tool says then, measured on
torch 2.13 with gloo, three ranks, rank 1 missing the third collective, a 3 s timeout:
- plain gloo: "Timed out waiting 3000ms for recv operation to complete": no rank, no collective;
- TORCH_DISTRIBUTED_DEBUG=DETAIL: before each collective the ranks compare what they are about
  to call. A different call fails at once ("Detected mismatch between collectives on ranks. Rank 0
  is running collective: CollectiveFingerPrint(SequenceNumber=2, OpType=ALLREDUCE ...), but Rank 1
  is running ... OpType=BROADCAST"); a missing rank fails at the timeout with "Ranks 1 failed to
  pass monitoredBarrier in 3000 ms" (the rank, not the collective). It adds a check per
  collective: a debugging switch, not for long runs. Its names can mislead: a barrier against an
  all_reduce is reported as a REDUCE by the others, and they as a GATHER by the barrier's rank
  (the check's own collectives); `summarize_collective_error` shortens what it says.
- the flight recorder (TORCH_FR_BUFFER_SIZE > 0): every rank keeps its last N collectives (name,
  sequence number, shapes, timeout) in memory. Under NCCL a timeout dumps it to
  `TORCH_FR_DUMP_TEMP_FILE<rank>` on every rank; gloo records too, and `dump_flight_record` writes
  it. Comparing the ranks' records names both the rank and the collective: `explain_hang`.
  (`python -m torch.distributed.flight_recorder.fr_trace DIR` analyses NCCL dumps; on gloo dumps
  it stops with a KeyError in 2.13, because their pg_config lacks the group's name.)
  Dump after the timeout's error is caught: a second thread dumping while the main thread still
  waits in a gloo collective took seconds or never finished (measured), so a launcher cannot
  collect the records of ranks that are still stuck.
"""

import os
import pickle
import re
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from unittest import mock

import torch
import torch.distributed as dist

from llmlab.distributed.launch import launch
from llmlab.files import write_atomically

FLIGHT_RECORDER_ENTRIES = "2000"  # the newest collectives each rank remembers (a ring buffer)
# The flight recorder's size, by its name and by the older one that torch 2.10's gloo alone reads
# (with only the new name it recorded nothing: measured; the pin, 2.13, reads the new one; 2.11
# and 2.12 untested, so they get both). Torch warns once per rank that the older is deprecated.
FLIGHT_RECORDER_SIZE_NAMES = ("TORCH_FR_BUFFER_SIZE",) + (
    ("TORCH_NCCL_TRACE_BUFFER_SIZE",) if torch.__version__ < "2.13" else ())


def hang_debug_env(backend: str = "gloo", dump_prefix: str = "fr_trace/rank_") -> dict:
    """The environment variables that turn a silent hang into a named one, as
    {name: (value, why)}. Set them before `init_process_group` (e.g. in the launcher's
    environment). The NCCL ones are written from PyTorch's documentation and not run here (no
    GPU); the gloo ones were measured (see this module's docstring). The timeout itself is not an
    environment variable: pass `init_process_group(timeout=timedelta(minutes=...))`."""
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    env = {
        "TORCH_DISTRIBUTED_DEBUG": (
            "DETAIL",
            "ranks compare each collective's type and shapes before running it: a different "
            "call fails at once, naming both ranks (costs a check per collective: debug only)",
        ),
        "TORCH_FR_BUFFER_SIZE": (
            FLIGHT_RECORDER_ENTRIES,
            "the flight recorder: each rank remembers its last collectives, to compare after a "
            "hang (explain_hang)",
        ),
        **{name: (FLIGHT_RECORDER_ENTRIES, "the older name of the same size: torch 2.10's gloo "
                  "reads only it") for name in FLIGHT_RECORDER_SIZE_NAMES[1:]},
        "TORCH_FR_DUMP_TEMP_FILE": (
            dump_prefix,
            "where dumps go, one file per rank (<prefix><rank>); fr_trace and "
            "load_flight_records read them",
        ),
    }
    if backend == "nccl":
        env |= {
            "TORCH_NCCL_DUMP_ON_TIMEOUT": (
                "1",
                "the watchdog writes every rank's flight record when a collective times out",
            ),
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": (
                "3",
                "a timed-out rank exits (without aborting the communicator, which can hang "
                "itself), so the launcher sees the failure and can restart the job",
            ),
            "TORCH_NCCL_ENABLE_MONITORING": (
                "1",
                "a second thread kills the process if the watchdog itself stops answering",
            ),
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": (
                "600",
                "how long that thread waits for the watchdog's heartbeat, in seconds",
            ),
            "TORCH_NCCL_DESYNC_DEBUG": (
                "1",
                "on a timeout, reports which rank did not join the collective",
            ),
        }
    return env


@dataclass(frozen=True)
class CollectiveCall:
    """One collective a rank entered, as its flight recorder saw it."""

    group: str  # the process group's name ("0": the default group)
    seq: int  # the rank's count of collectives in this group, from 1
    name: str  # all_reduce, broadcast, barrier, ...
    timeout_s: float | None


def parse_flight_record(dump: bytes) -> list[CollectiveCall]:
    """The collectives in one rank's flight-recorder dump (`_dump_fr_trace()`'s pickle, or a
    file the NCCL watchdog wrote), oldest first; point-to-point sends and receives are left out
    (their sequence numbers count apart from the collectives')."""
    record = pickle.loads(dump)  # noqa: S301 - a dump this job's own ranks wrote
    calls = []
    for entry in record.get("entries", []):
        if not entry.get("collective_seq_id"):
            continue
        timeout_ms = entry.get("timeout_ms")
        calls.append(CollectiveCall(
            group=str(entry["process_group"][0]),
            seq=int(entry["collective_seq_id"]),
            # "gloo:all_reduce" / "nccl:all_reduce": the backend prefix says nothing here
            name=entry["profiling_name"].split(":", 1)[-1],
            timeout_s=None if timeout_ms is None else timeout_ms / 1000,
        ))
    return calls


def dump_flight_record(prefix: str | Path, group: dist.ProcessGroup | None = None) -> Path:
    """Write this rank's flight record of `group`'s backend (the default group's when None) to
    `<prefix><rank>` (the naming NCCL's dump on timeout uses) and return the path. Call it where
    a collective's timeout was caught; it needs TORCH_FR_BUFFER_SIZE > 0 set before the process
    group was created."""
    from torch._C import _distributed_c10d as c10d  # no public names yet in torch 2.13

    # NCCL's collectives go to a recorder of their own (it keeps CUDA events); gloo's to the
    # generic one. Dumping the generic one under NCCL gives an empty record.
    dump = c10d._dump_nccl_trace if dist.get_backend(group) == "nccl" else c10d._dump_fr_trace
    path = Path(f"{prefix}{dist.get_rank()}")
    write_atomically(path, dump())  # a reader never sees half a dump
    return path


def load_flight_records(prefix: str | Path) -> dict[int, list[CollectiveCall]]:
    """Every rank's dump written under `prefix` (files `<prefix><rank>`), by rank."""
    prefix = Path(prefix)
    records = {}
    for path in sorted(prefix.parent.glob(prefix.name + "*")):
        rank = path.name[len(prefix.name) :]
        if rank.isdigit():
            records[int(rank)] = parse_flight_record(path.read_bytes())
    if not records:
        raise FileNotFoundError(
            f"no flight-recorder dumps named {prefix}<rank>: was TORCH_FR_BUFFER_SIZE set before "
            "init_process_group, and did each rank call dump_flight_record (or, under NCCL, "
            "TORCH_NCCL_DUMP_ON_TIMEOUT=1 write them)?"
        )
    if not any(records.values()):  # nothing to compare: not "no hang"
        raise ValueError(
            f"the flight-recorder dumps under {prefix.parent} hold no collective: was the "
            f"recorder sized ({' and '.join(FLIGHT_RECORDER_SIZE_NAMES)}) before the process "
            "group was created?"
        )
    return records


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def explain_hang(records: dict[int, list[CollectiveCall]]) -> str | None:
    """Compare every rank's collectives, group by group, and name the first one where they part:
    the rank(s) that never reached it, or the ranks that called something else there. None when
    every rank of every group entered the same collectives.

    A group's ranks are those that recorded any collective in it. The flight recorder keeps only
    the newest entries, so the comparison starts where every rank's record still reaches.
    """
    by_group: dict[str, dict[int, dict[int, CollectiveCall]]] = {}
    for rank, calls in records.items():
        for call in calls:
            by_group.setdefault(call.group, {}).setdefault(rank, {})[call.seq] = call
    problems = []
    for group, ranks in sorted(by_group.items()):
        first = max(min(calls) for calls in ranks.values())
        last = max(max(calls) for calls in ranks.values())
        for seq in range(first, last + 1):
            names = {rank: calls[seq].name if seq in calls else None
                     for rank, calls in sorted(ranks.items())}
            if len(set(names.values())) > 1:
                problems.append(_describe(group, seq, names, ranks))
                break
    return "\n".join(problems) or None


def _describe(group: str, seq: int, names: dict, ranks: dict) -> str:
    """One sentence for the first collective `seq` of `group` where the ranks differ."""
    where = "" if group == "0" else f" of process group {group}"
    missing = [rank for rank, name in names.items() if name is None]
    arrived = {rank: name for rank, name in names.items() if name is not None}
    if missing and len(set(arrived.values())) == 1:
        name = next(iter(arrived.values()))
        timeout = ranks[next(iter(arrived))][seq].timeout_s
        waited = f" for {timeout:g} s (the group's timeout)" if timeout else ""
        last = {rank: max(ranks[rank]) for rank in missing}
        seen = "; ".join(f"rank {rank}'s last was #{n}, {ranks[rank][n].name}"
                         for rank, n in last.items())
        return (
            f"{_ranks(missing)} never reached {name} #{seq}{where}: {_ranks(sorted(arrived))} "
            f"waited there{waited} ({seen})"
        )
    calls = {}
    for rank, name in names.items():
        calls.setdefault(name or "nothing (never reached it)", []).append(rank)
    listing = "; ".join(f"{_ranks(r)} called {name}" for name, r in calls.items())
    return f"the ranks called different collectives at #{seq}{where}: {listing}"


# What torch 2.13 says under TORCH_DISTRIBUTED_DEBUG=DETAIL (measured; see the docstring above).
_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\("
                          r"SequenceNumber=(\d+),? ?OpType=(\w+)")
_MONITORED_BARRIER = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier in (\d+) ms")


def summarize_collective_error(message: str) -> str | None:
    """One line from torch's own report of a collective gone wrong, where it names the ranks:
    DETAIL's mismatch (two fingerprints of several hundred characters each) or a monitored
    barrier's timeout. None for a message that names no rank (plain gloo's "Timed out waiting
    3000ms for recv operation": compare flight records then, explain_hang)."""
    calls = _FINGERPRINT.findall(message)
    if len(calls) >= 2:
        (rank_a, seq, op_a), (rank_b, _, op_b) = calls[:2]
        # DETAIL counts from 0; the flight recorder and explain_hang from 1
        return (
            f"rank {rank_a} called {op_a} and rank {rank_b} called {op_b} as collective "
            f"#{int(seq) + 1} of their group"
        )
    late = _MONITORED_BARRIER.search(message)
    if late:
        ranks = [int(rank) for rank in late.group(1).replace(",", " ").split()]
        return (
            f"{_ranks(ranks)} did not reach the collective within {int(late.group(2)) / 1000:g} s "
            "(monitored barrier: which collective, the flight records tell)"
        )
    return None


# The collectives the demo's ranks run, in order: what one training step might call.
DEMO_COLLECTIVES = ("all_reduce", "broadcast", "all_reduce", "barrier", "all_gather")


def _call(name: str, group) -> None:
    tensor = torch.ones(4)
    if name == "all_reduce":
        dist.all_reduce(tensor, group=group)
    elif name == "broadcast":
        dist.broadcast(tensor, src=0, group=group)
    elif name == "barrier":
        dist.barrier(group=group)
    elif name == "all_gather":
        dist.all_gather([torch.empty_like(tensor) for _ in range(dist.get_world_size())],
                        tensor, group=group)


def _demo_rank(skip_rank, position, instead, timeout_s, prefix) -> None:
    """One rank of `hang_demo`: run the demo's collectives on a group with a short timeout;
    `skip_rank` skips the one at `position` (or calls `instead` there); dump the flight record."""
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
    try:
        for index, name in enumerate(DEMO_COLLECTIVES, start=1):
            if dist.get_rank() == skip_rank and index == position:
                if instead is None:
                    time.sleep(timeout_s * 1.5)  # busy elsewhere: the others' wait times out
                    break
                name = instead
            _call(name, group)
    except RuntimeError as error:  # the timeout, as gloo reports it (no rank, no collective)
        print(f"caught: {str(error).splitlines()[0][:120]}", flush=True)
    dump_flight_record(prefix, group)


def hang_demo(
    nprocs: int = 3,
    skip_rank: int | None = 1,
    position: int = 3,
    instead: str | None = None,
    timeout_s: float = 2.0,
) -> str | None:
    """Run `nprocs` ranks through DEMO_COLLECTIVES, where `skip_rank` never reaches the one at
    `position` (1-based), or calls `instead` there; return explain_hang's message from the ranks'
    flight records (None when skip_rank is None: no hang)."""
    if skip_rank is not None and not 0 <= skip_rank < nprocs:
        raise ValueError(f"skip_rank must be None or a rank in 0..{nprocs - 1}, got {skip_rank}")
    if not 1 <= position <= len(DEMO_COLLECTIVES):
        raise ValueError(f"position must be in 1..{len(DEMO_COLLECTIVES)}, got {position}")
    if instead is not None and instead not in DEMO_COLLECTIVES:
        raise ValueError(f"instead must be None or one of {DEMO_COLLECTIVES}, got {instead!r}")
    # The recorder's size goes in the ranks' environment from the start: torch 2.13 reads it when
    # each group is made, 2.10 when the first is (launch's own, before _demo_rank runs).
    recorder_size = dict.fromkeys(FLIGHT_RECORDER_SIZE_NAMES, FLIGHT_RECORDER_ENTRIES)
    with (tempfile.TemporaryDirectory(prefix="flight-records-") as folder,
          mock.patch.dict(os.environ, recorder_size)):  # put back as it was afterwards
        prefix = Path(folder) / "rank_"
        # The launcher's own limit is well past the demo group's timeout, so the collectives'
        # timeouts end the hang, as they would in a real job.
        launch(_demo_rank, nprocs, args=(skip_rank, position, instead, timeout_s, prefix),
               timeout_s=4 * timeout_s + 60)
        return explain_hang(load_flight_records(prefix))
