"""Tensor-parallel and 2-D (data x tensor parallel) training runs against one process: the
batches they cut, a run on one rank that is the reference, runs on 2 and 4 ranks that match it
to rounding, and runs that do not once a collective or the data-parallel average is removed."""

from functools import partial

import pytest
from torch.distributed.tensor import Partial
from torch.distributed.tensor.parallel import RowwiseParallel

from llmlab.distributed import LaunchError, launch
from llmlab.distributed.harness.equivalence import SMOKE_SHAPE, global_batches, parameters_error
from llmlab.distributed.harness.model_parallel import (
    token_batches,
    train_single_process,
    train_tensor_parallel,
)
from llmlab.distributed.tensor_parallel import tensor_parallel_plan
from llmlab.models import build_model, preset

TOLERANCE = 1e-5  # the target for TP vs one process, relative, fp32
SHAPE = preset("tiny", n_layer=1, vocab_size=64, context=8)


def test_token_batches_are_the_global_batches_cut_to_seq_inputs_and_the_next_token():
    batches = token_batches(SHAPE, steps=2, batch=3, seq=5)
    assert batches.shape == (2, 3, 6)
    assert (batches == global_batches(2, 3, SHAPE)[:, :, :6]).all()
    with pytest.raises(ValueError, match="seq=9 is longer than the model's context 8"):
        token_batches(SHAPE, steps=2, batch=3, seq=9)


def test_a_run_on_one_rank_is_the_single_process_reference():
    run = partial(train_tensor_parallel, SHAPE, steps=2, batch=2, seq=5, tp=1)
    [one_rank] = launch(run, nprocs=1, timeout_s=60)
    reference = train_single_process(SHAPE, steps=2, batch=2, seq=5)
    assert parameters_error(one_rank.params, reference) < TOLERANCE
    assert len(one_rank.losses) == 2 and one_rank.comm_counts == {}  # nothing to send alone


@pytest.mark.slow
@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_five_steps_of_tensor_parallel_match_one_process(smoke_reference, sequence_parallel):
    run = partial(train_tensor_parallel, tp=2, sequence_parallel=sequence_parallel)
    runs = launch(run, nprocs=2, timeout_s=120)
    for run in runs:
        assert parameters_error(run.params, smoke_reference) < TOLERANCE
    per_block, at_the_ends = (8, 2) if sequence_parallel else (4, 0)
    assert sum(runs[0].comm_counts.values()) == per_block * SMOKE_SHAPE.n_layer + at_the_ends


@pytest.mark.slow
def test_the_comparison_fails_without_the_row_parallel_all_reduce(smoke_reference):
    plan = tensor_parallel_plan(build_model(SMOKE_SHAPE))
    plan["mlp.c_proj"] = RowwiseParallel(output_layouts=Partial())  # keep the partial sums
    run = launch(partial(train_tensor_parallel, tp=2, plan=plan), nprocs=2, timeout_s=120)
    assert parameters_error(run[0].params, smoke_reference) > 1e-2


@pytest.mark.slow
@pytest.mark.parametrize("average", [True, False])
def test_2d_data_and_tensor_parallel_on_four_ranks_matches_one_process(average, smoke_reference):
    runs = launch(partial(train_tensor_parallel, tp=2, average_gradients=average), nprocs=4,
                  timeout_s=120)
    errors = [parameters_error(run.params, smoke_reference) for run in runs]
    if average:
        assert max(errors) < TOLERANCE
    else:  # without the data-parallel gradient average each half of the batch trains alone
        assert min(errors) > 1e-2


def test_a_batch_the_data_parallel_ranks_do_not_divide_is_refused():
    with pytest.raises(LaunchError, match="does not split over 2 data-parallel ranks"):
        launch(partial(train_tensor_parallel, tp=1, steps=1, batch=3), nprocs=2,
               timeout_s=60)
