"""DeepSpeed ZeRO-2 and ZeRO-3 on 2 CPU processes train exactly as one process does, and the
check catches training without DeepSpeed's gradient reduction."""

import pytest

from llmlab.distributed.deepspeed_run import TARGET, compare_deepspeed, deepspeed_available

pytestmark = pytest.mark.skipif(not deepspeed_available(), reason="deepspeed not installed")


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_zero_matches_one_process_and_the_memory_plan(stage):
    result = compare_deepspeed(stage, nprocs=2, steps=5)
    # Invariant: averaging the gradients over the ranks gives the global batch's gradient, so
    # the parameters agree up to summation order (1e-6 measured; the bound is 1e-4).
    assert result.max_rel_error <= TARGET, result
    # Invariant: each rank's peak of live tensors is the planner's estimate plus the two
    # buffers DeepSpeed is known to add (deepspeed_extra_bytes), within the 10%.
    assert result.memory_ratio == pytest.approx(1.0, abs=0.10), result


@pytest.mark.slow
def test_the_check_fails_without_gradient_reduction():
    """Each rank training alone on its slice (no communication) ends far from one process."""
    result = compare_deepspeed(2, nprocs=2, steps=5, communicating=False)
    assert not result.passed
    assert result.max_rel_error > 1e3 * TARGET


@pytest.mark.parametrize(
    "kwargs, message",
    [({"stage": 1}, "stage must be 2 or 3"), ({"stage": 2, "global_batch": 3}, "does not split")],
)
def test_bad_input_is_refused_before_any_process_starts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compare_deepspeed(**kwargs)
