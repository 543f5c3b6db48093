"""The harness reports what the notebook prints: differences from one process, the choices dropped
and the bytes sent (EP), refuses a method it does not know (CP), and times a message and an
all-to-all the same on every rank (no test reads the times' values: they are the machine's)."""

import pytest

from llmlab.distributed import LaunchError, launch
from llmlab.distributed.harness.experts_and_context import (
    communication_times,
    context_parallel_differences,
    expert_parallel_differences,
    torch_context_parallel_difference,
)


def test_expert_parallel_reports_drops_and_bytes_per_rank():
    shape = (8, 12, 12, 16)  # hidden, ff, experts, tokens
    without = launch(expert_parallel_differences, nprocs=2, args=shape, timeout_s=60)
    with_capacity = launch(expert_parallel_differences, nprocs=2, args=(*shape, 0.5),
                           timeout_s=60)
    assert [r["dropped"] for r in without] == [0, 0]
    assert all(r["dropped"] > 0 for r in with_capacity)
    # Fewer choices travel when some are dropped; none of a rank's bytes are its own.
    assert all(0 < c["sent bytes"] < w["sent bytes"]
               for w, c in zip(without, with_capacity, strict=True))
    for result in without + with_capacity:
        assert max(result[k] for k in ("output", "input grad", "router grad",
                                       "expert grads")) < 1e-5, result


def test_context_parallel_names_the_methods_it_knows():
    with pytest.raises(ValueError, match=r"method must be one of \('ring', 'ulysses'\)"):
        context_parallel_differences("striped", 8)


def test_torchs_context_parallel_is_refused_on_cpu_ranks_with_its_reason():
    # The notebook prints this refusal on CPU; on GPUs the same function compares (not run here).
    with pytest.raises(LaunchError, match="does not have a sharding strategy registered"):
        launch(torch_context_parallel_difference, nprocs=2, timeout_s=60)


def test_communication_times_are_one_table_shared_by_every_rank():
    results = launch(communication_times, nprocs=3, args=([48, 480], 2), timeout_s=60)
    assert results[0] == results[1] == results[2]  # the slowest rank's time, everywhere
    assert set(results[0]) == {"exchange", "all_to_all"}
    assert all(set(times) == {48, 480} and all(t > 0 for t in times.values())
               for times in results[0].values())
    with pytest.raises(LaunchError, match="not a whole number of fp32 values per rank"):
        launch(communication_times, nprocs=3, args=([40],), timeout_s=60)
