"""Hangs named: the comparison of flight records on made-up calls, then real ranks (gloo) where
one rank skips a collective or calls another one."""

import pickle
from datetime import timedelta

import pytest

from llmlab.distributed import launch
from llmlab.jobs.hangs import (
    FLIGHT_RECORDER_SIZE_NAMES,
    CollectiveCall,
    explain_hang,
    hang_debug_env,
    hang_demo,
    load_flight_records,
    parse_flight_record,
    summarize_collective_error,
)


def calls(*names, group="0", first=1, timeout_s=5.0):
    return [CollectiveCall(group, seq, name, timeout_s) for seq, name in enumerate(names, first)]


def test_identical_records_say_nothing():
    same = calls("all_reduce", "barrier", "all_reduce")
    assert explain_hang({0: same, 1: same, 2: same}) is None


def test_the_missing_rank_and_the_collective_are_named():
    full = calls("all_reduce", "broadcast", "all_reduce")
    message = explain_hang({0: full, 1: full[:2], 2: full})
    assert message == (
        "rank 1 never reached all_reduce #3: ranks 0, 2 waited there for 5 s (the group's "
        "timeout) (rank 1's last was #2, broadcast)"
    )


def test_a_different_call_is_named_with_the_ranks_on_each_side():
    message = explain_hang({0: calls("all_reduce", "barrier"), 1: calls("all_reduce", "all_gather"),
                            2: calls("all_reduce", "barrier")})
    assert message == (
        "the ranks called different collectives at #2: ranks 0, 2 called barrier; "
        "rank 1 called all_gather"
    )


def test_a_wrapped_ring_buffer_is_compared_where_every_record_reaches():
    # rank 0 kept collectives 3-5 only; rank 1 kept 1-4 and never reached the 5th
    message = explain_hang({0: calls("a", "b", "c", first=3), 1: calls("x", "y", "a", "b")})
    assert message.startswith("rank 1 never reached c #5: rank 0 waited there")


def test_each_group_is_compared_on_its_own():
    records = {0: calls("all_reduce", group="0") + calls("barrier", "barrier", group="2"),
               1: calls("all_reduce", group="0") + calls("barrier", group="2")}
    assert explain_hang(records).startswith("rank 1 never reached barrier #2 of process group 2")


def test_a_torch_dump_is_parsed_without_its_backend_prefix_or_p2p_calls():
    entry = {"process_group": ("1", "undefined"), "profiling_name": "gloo:all_reduce",
             "timeout_ms": 2000}
    dump = pickle.dumps(
        {
            "entries": [
                {**entry, "collective_seq_id": 1},
                {**entry, "collective_seq_id": 0, "profiling_name": "send"},
            ]
        }
    )
    assert parse_flight_record(dump) == [CollectiveCall("1", 1, "all_reduce", 2.0)]


def test_no_dumps_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="TORCH_FR_BUFFER_SIZE"):
        load_flight_records(tmp_path / "rank_")


def test_dumps_without_a_collective_are_a_clear_error_not_no_hang(tmp_path):
    """What a recorder that was never sized leaves (torch 2.10's gloo with the new name alone):
    no collective on any rank, which must not read as 'every rank called the same ones'."""
    for rank in range(2):
        (tmp_path / f"rank_{rank}").write_bytes(pickle.dumps({"version": "2.10", "entries": []}))
    with pytest.raises(ValueError, match="hold no collective: was the recorder sized"):
        load_flight_records(tmp_path / "rank_")


def test_debug_env_says_why_and_guards_nccl_only_settings():
    gloo, nccl = hang_debug_env("gloo"), hang_debug_env("nccl")
    assert gloo["TORCH_DISTRIBUTED_DEBUG"][0] == "DETAIL"
    assert all(int(gloo[name][0]) > 0 for name in FLIGHT_RECORDER_SIZE_NAMES)
    # The recorder's older name starts with TORCH_NCCL but is gloo's too (torch 2.10's reads it).
    assert not any(name.startswith("TORCH_NCCL") for name in gloo
                   if name not in FLIGHT_RECORDER_SIZE_NAMES)
    assert nccl["TORCH_NCCL_DUMP_ON_TIMEOUT"][0] == "1" and set(gloo) < set(nccl)
    assert all(why for _, why in nccl.values())
    with pytest.raises(ValueError, match="'gloo' or 'nccl'"):
        hang_debug_env("mpi")


@pytest.mark.slow
def test_real_ranks_name_the_skipping_rank_and_its_collective():
    message = hang_demo(nprocs=3, skip_rank=1, position=3, timeout_s=2)
    assert message.startswith("rank 1 never reached all_reduce #3 of process group 1: ranks 0, 2")


@pytest.mark.slow
def test_real_ranks_name_another_rank_and_collective():
    message = hang_demo(nprocs=3, skip_rank=2, position=4, timeout_s=2)
    assert message.startswith("rank 2 never reached barrier #4 of process group 1: ranks 0, 1")


@pytest.mark.slow
def test_real_ranks_calling_another_collective_are_named():
    message = hang_demo(nprocs=3, skip_rank=1, position=3, instead="broadcast", timeout_s=2)
    assert message.endswith("ranks 0, 2 called all_reduce; rank 1 called broadcast")


def test_real_ranks_without_a_hang_say_nothing():
    assert hang_demo(nprocs=3, skip_rank=None) is None


DETAIL_MISMATCH = (
    "Detected mismatch between collectives on ranks. Rank 1 is running collective: "
    "CollectiveFingerPrint(SequenceNumber=2, OpType=BROADCAST, TensorShape=[4], "
    "TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu)), "
    "but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=2, "
    "OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, ...).Collectives differ in the "
    "following aspects:   Op type: BROADCASTvs ALLREDUCE"
)


@pytest.mark.parametrize(
    ("message", "summary"),
    [
        (DETAIL_MISMATCH, "rank 1 called BROADCAST and rank 0 called ALLREDUCE as collective #3 "
                          "of their group"),
        # a collective without tensors: torch leaves out the comma (and says REDUCE for barrier)
        ("Detected mismatch between collectives on ranks. Rank 0 is running collective: "
         "CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, TensorShape=[4]), but Rank 2 "
         "is running collective: CollectiveFingerPrint(SequenceNumber=0OpType=REDUCE).",
         "rank 0 called ALLREDUCE and rank 2 called REDUCE as collective #1 of their group"),
        ("[Rank 0]: Ranks 1 failed to pass monitoredBarrier in 3000 ms",
         "rank 1 did not reach the collective within 3 s (monitored barrier: which collective, "
         "the flight records tell)"),
        ("[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 500 ms",
         "ranks 1, 3 did not reach the collective within 0.5 s (monitored barrier: which "
         "collective, the flight records tell)"),
        ("[../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv "
         "operation to complete", None),
    ],
)
def test_torch_reports_that_name_ranks_are_summed_up_in_one_line(message, summary):
    assert summarize_collective_error(message) == summary


def _mismatch_under_detail(odd_rank: int):
    import torch
    import torch.distributed as dist

    dist.set_debug_level(dist.DebugLevel.DETAIL)  # as TORCH_DISTRIBUTED_DEBUG=DETAIL does
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=10))
    tensor = torch.ones(4)
    try:
        if dist.get_rank() == odd_rank:
            dist.broadcast(tensor, src=0, group=group)
        else:
            dist.all_reduce(tensor, group=group)
    except RuntimeError as error:
        return summarize_collective_error(str(error))
    return "no error"


@pytest.mark.parametrize("odd_rank", [1, 2])
def test_detail_names_a_different_call_at_once(odd_rank):
    summaries = launch(_mismatch_under_detail, 3, args=(odd_rank,), timeout_s=60)
    # each rank compares itself with one other: every line names the odd rank and its call
    assert all(f"rank {odd_rank} called BROADCAST" in line for line in summaries)
    assert all("#1 of their group" in line and "ALLREDUCE" in line for line in summaries)


@pytest.mark.parametrize("backend, recorder", [("nccl", "_dump_nccl_trace"),
                                               ("gloo", "_dump_fr_trace")])
def test_the_dump_reads_the_recorder_of_the_groups_backend(backend, recorder, tmp_path,
                                                           monkeypatch):
    # NCCL keeps its own recorder: dumping the generic one under NCCL gave 0 collectives on an
    # H200 (the GPU check). A CPU build of torch has no NCCL dump, so both are stand-ins here.
    from torch._C import _distributed_c10d as c10d

    from llmlab.jobs import hangs

    entry = {"process_group": ("0", "default_pg"), "profiling_name": f"{backend}:all_reduce",
             "timeout_ms": 1000, "collective_seq_id": 1}
    for name in ("_dump_nccl_trace", "_dump_fr_trace"):
        dump = pickle.dumps({"entries": [entry] if name == recorder else []})
        monkeypatch.setattr(c10d, name, lambda dump=dump: dump, raising=False)
    monkeypatch.setattr(hangs.dist, "get_backend", lambda group=None: backend)
    monkeypatch.setattr(hangs.dist, "get_rank", lambda: 0)
    hangs.dump_flight_record(tmp_path / "rank_")
    assert load_flight_records(tmp_path / "rank_") == {0: [CollectiveCall("0", 1, "all_reduce",
                                                                          1.0)]}
