"""DeepSpeed ZeRO-2 and ZeRO-3 on 2 CPU processes train exactly as one process does, and the
check catches DeepSpeed with its gradient reduction removed."""

import json
import re

import pytest

from llmlab.distributed import run_script
from llmlab.distributed.deepspeed_run import TARGET, compare_deepspeed, deepspeed_available, main

pytestmark = pytest.mark.skipif(not deepspeed_available(), reason="deepspeed not installed")


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_zero_matches_one_process(stage):
    result = compare_deepspeed(stage, nprocs=2, steps=5)
    # Invariant: averaging the gradients over the ranks gives the global batch's gradient, so
    # the parameters agree up to summation order (2e-6 measured; the target is 1e-4).
    assert result.max_rel_error <= TARGET, result
    # Each rank's peak of live tensors against the planner adjusted for DeepSpeed's gradient
    # shard and fp32 copy (deepspeed_planned_peak): 1.09 (ZeRO-2) and 1.12 (ZeRO-3) measured.
    assert result.memory_ratio == pytest.approx(1.0, abs=0.15), result
    # Invariant: ZeRO-2 sends what its formula says exactly; ZeRO-3 keeps the last blocks
    # of the forward pass gathered for backward, so it sends a little less (0.87) than 1.5x DDP.
    assert result.bytes_sent_per_rank / result.bytes_formula == pytest.approx(
        1.0 if stage == 2 else 0.87, abs=0.05
    )


@pytest.mark.slow
@pytest.mark.parametrize("stage, drop", [(2, "all_reduce"), (3, "reduce_scatter")])
def test_the_check_fails_without_gradient_reduction(stage, drop):
    """Each rank then updates its shard with its own slice's gradient only."""
    result = compare_deepspeed(stage, nprocs=2, steps=5, drop=drop)
    assert not result.passed
    assert result.max_rel_error > 1e3 * TARGET


@pytest.mark.parametrize(
    "kwargs, message",
    [({"stage": 1}, "stage must be 2 or 3"), ({"stage": 2, "global_batch": 3}, "does not split"),
     ({"stage": 3, "drop": "all_reduce"}, "reduces gradients with")],
)  # fmt: skip
def test_bad_input_is_refused_before_any_process_starts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compare_deepspeed(**kwargs)


@pytest.mark.slow
def test_runs_under_torchrun_as_practitioners_run_it(tmp_path):
    output = run_script("llmlab.distributed.deepspeed_run", nprocs=2, module=True,
                        script_args=["--stage", "2", "--config", tmp_path / "ds.json"],
                        timeout_s=300)  # fmt: skip
    error = float(re.search(r"max relative error (\S+) against", output).group(1))
    assert error <= TARGET, output
    assert json.loads((tmp_path / "ds.json").read_text())["zero_optimization"]["stage"] == 2


def test_the_terminal_entry_asks_for_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match="torchrun --nproc_per_node 2"):
        main([])
