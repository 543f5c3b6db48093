"""Pipeline parallelism: two stages under GPipe and 1F1B, and two ranks of two chunks each under
interleaved 1F1B and interleaved zero bubble, train like one process; stage bounds. (The
bubble's formula: tests/scale/test_comm_cost.py; the schedules' time lines:
tests/scale/test_schedules.py.)"""

from functools import partial

import pytest
import torch
from torch.torch_version import TorchVersion

from llmlab.distributed import LaunchError, launch
from llmlab.distributed.harness.equivalence import (
    parameters_error,
)
from llmlab.distributed.harness.pipeline import fewest_microbatches, stage_bounds, train_pipeline

TOLERANCE = 1e-5  # the target for PP vs one process, relative, fp32


def _whole_model(runs) -> dict:
    params = {}
    for run in runs:  # each stage's parameters, named as in the whole model
        params.update(run.params)
    return params


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_two_stages_match_one_process_after_five_steps(schedule, smoke_reference):
    runs = launch(partial(train_pipeline, schedule=schedule), nprocs=2, timeout_s=120)
    assert parameters_error(_whole_model(runs), smoke_reference) < TOLERANCE
    assert len(runs[1].losses) == 5 and runs[0].losses == []  # the last stage computes the loss
    assert all(0 <= run.idle_fraction < 1 for run in runs)


@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "interleaved-zero-bubble"])
def test_interleaved_schedules_with_two_chunks_a_rank_match_one_process(schedule,
                                                                        smoke_reference):
    # The smoke model's 4 blocks in 4 stages: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3.
    runs = launch(partial(train_pipeline, schedule=schedule, chunks=2), nprocs=2, timeout_s=120)
    assert parameters_error(_whole_model(runs), smoke_reference) < TOLERANCE
    assert {name.split(".")[2] for name in runs[0].params if ".h." in name} == {"0", "2"}
    assert len(runs[1].losses) == 5 and runs[0].losses == []


def test_the_comparison_fails_without_the_tied_embedding_all_reduce(smoke_reference):
    runs = launch(partial(train_pipeline, sync_tied=False), nprocs=2, timeout_s=120)
    assert parameters_error(_whole_model(runs), smoke_reference) > 1e-2


def test_stage_bounds():
    assert stage_bounds(4, 2) == [(0, 2), (2, 4)]
    assert stage_bounds(5, 3) == [(0, 2), (2, 4), (4, 5)]
    with pytest.raises(ValueError, match="each stage needs at least one"):
        stage_bounds(2, 3)


def test_bad_input_is_named():
    with pytest.raises(LaunchError, match="unknown schedule 'zb'"):
        launch(partial(train_pipeline, steps=1, schedule="zb"), nprocs=2, timeout_s=60)
    with pytest.raises(LaunchError, match="take 2 or more"):
        launch(partial(train_pipeline, steps=1, schedule="interleaved-1f1b"), nprocs=2,
               timeout_s=60)
    with pytest.raises(LaunchError, match="does not cut into 3 equal micro-batches"):
        launch(partial(train_pipeline, steps=1, microbatches=3), nprocs=2, timeout_s=60)
    with pytest.raises(LaunchError, match=r"1f1b on torch .* micro-batches as ranks \(2\): got 1"):
        launch(partial(train_pipeline, steps=1, schedule="1f1b", microbatches=1), nprocs=2,
               timeout_s=60)


@pytest.mark.parametrize("version, gpipe", [("2.10.0+cu128", 4), ("2.11.0", 1), ("2.13.0+cpu", 1)])
def test_fewest_microbatches_follow_the_torch_that_runs_them(monkeypatch, version, gpipe):
    """Torch 2.10 refuses fewer micro-batches than stages for every schedule (Lab 04's bubble
    sweep starts at m = 1 only from 2.11 on); 1F1B and the interleaved ones refuse it always."""
    monkeypatch.setattr(torch, "__version__", TorchVersion(version))
    assert fewest_microbatches("gpipe", 4) == gpipe
    assert fewest_microbatches("1f1b", 4) == fewest_microbatches("interleaved-1f1b", 4) == 4
    with pytest.raises(ValueError, match="unknown schedule 'zb'"):
        fewest_microbatches("zb", 4)
