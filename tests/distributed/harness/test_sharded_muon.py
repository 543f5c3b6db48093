"""Muon sharded over 2 and 3 gloo ranks (ZeRO-1) trains like one process, keeps 1/N of Muon's
states per rank and sends what ZeRO-1's formula says; it stops matching when its broadcast is
removed, and the sharding alone changes nothing (the same as Muon on DDP, unsharded)."""

import pytest
import torch

from llmlab.distributed.harness.equivalence import SMOKE_SHAPE, parameters_error
from llmlab.distributed.harness.sharded_muon import compare_sharded_muon, muon_and_sgd
from llmlab.models import block_matrices, build_model
from llmlab.train.muon import FP32Muon


def test_muon_takes_the_blocks_matrices_and_sgd_everything_else():
    model = build_model(SMOKE_SHAPE, seed=0)
    muon, sgd = muon_and_sgd(model, "none", FP32Muon)
    on_muon = {id(p) for group in muon.param_groups for p in group["params"]}
    on_sgd = {id(p) for group in sgd.param_groups for p in group["params"]}
    assert on_muon == {id(layer.weight) for layer in block_matrices(model).values()}
    assert on_muon.isdisjoint(on_sgd) and on_muon | on_sgd == {id(p) for p in model.parameters()}
    assert isinstance(muon, FP32Muon) and isinstance(sgd, torch.optim.SGD)


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [2, 3])
def test_sharded_muon_matches_one_process_with_a_share_of_the_states(nprocs):
    sharded = compare_sharded_muon(nprocs, muon_class=FP32Muon)
    assert sharded.passed, sharded.max_rel_error
    # The tiny preset's 16 matrices split into equal shares of values at 2 and 3 ranks.
    assert sharded.state_values_per_rank == (sharded.state_values_formula,) * nprocs
    assert sum(sharded.matrices_per_rank) == len(block_matrices(build_model(SMOKE_SHAPE)))
    assert sharded.bytes_sent_per_rank == pytest.approx(sharded.bytes_formula, rel=0.05)
    # Sharding moves where each matrix is updated, not how: the same weights as Muon on DDP.
    unsharded = compare_sharded_muon(nprocs, strategy="ddp", muon_class=FP32Muon)
    assert unsharded.state_values_per_rank == (nprocs * sharded.state_values_formula,) * nprocs
    assert parameters_error(sharded.parameters, unsharded.parameters) <= 1e-6


@pytest.mark.slow
def test_the_check_fails_without_the_broadcast():
    result = compare_sharded_muon(2, muon_class=FP32Muon, drop="broadcast")
    assert result.max_rel_error > 100 * result.target, result.max_rel_error


def test_bad_arguments_are_refused_before_any_rank_starts():
    with pytest.raises(ValueError, match="zero1"):
        compare_sharded_muon(2, strategy="fsdp")
    with pytest.raises(ValueError, match="broadcast"):
        compare_sharded_muon(2, drop="reduce_scatter")
    with pytest.raises(ValueError, match="multiple of 3"):
        compare_sharded_muon(3, global_batch=4)
