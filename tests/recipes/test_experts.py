"""The facts recipe trains every variant it names and records loads and drops in the shapes the
lab shows; the same seed gives the same run; recall scores the values only."""

import dataclasses

import pytest
import torch

from llmlab.models import build_model
from llmlab.models.moe import with_experts
from llmlab.recipes.experts import COMPARED, VARIANTS, FactsRecipe, recall, train_on_facts

TINY = FactsRecipe(num_facts=64, key_vocab=16, num_values=8, facts_per_row=4, rows=4, steps=6,
                   d_model=16, warmup_steps=1)


@pytest.mark.parametrize("variant", ["dense F", "MoE + aux loss", "MoE + bias"])
def test_a_run_records_what_the_lab_shows(variant):
    run = train_on_facts(variant, seed=0, recipe=TINY)
    experts = VARIANTS[variant]["num_experts"]
    assert run.loads.shape == (TINY.steps, TINY.n_layer, experts)
    assert (run.loads.sum(dim=-1) == TINY.rows * TINY.facts_per_row * 3).all()
    assert run.dropped.shape == (TINY.steps, TINY.n_layer)
    assert run.imbalance.shape == (TINY.steps,) and (run.imbalance >= 1).all()
    assert 0 <= run.accuracy <= 1 and run.loss > 0 and len(run.losses) == TINY.steps


def test_the_compared_moe_has_the_dense_models_active_parameters_and_four_times_its_mlps():
    dense, moe = (VARIANTS[name] for name in COMPARED[:2])
    assert moe["top_k"] == 1 and moe["ff"] == dense["ff"] and moe["num_experts"] == 4
    dense_run = train_on_facts("dense F", seed=0, recipe=dataclasses.replace(TINY, steps=1))
    moe_run = train_on_facts("MoE, no balancing", seed=0,
                             recipe=dataclasses.replace(TINY, steps=1))
    mlp = 3 * TINY.d_model * dense["ff"] * TINY.n_layer  # one SwiGLU per block
    router = TINY.d_model * 4 * TINY.n_layer
    assert moe_run.parameters - dense_run.parameters == 3 * mlp + router - TINY.d_model * 1 * 2


def test_the_same_seed_gives_the_same_run():
    first, second = (train_on_facts("MoE, no balancing", seed=1, recipe=TINY) for _ in range(2))
    assert first.loss == second.loss and torch.equal(first.loads, second.loads)


def test_recall_scores_the_values_only():
    table = TINY.table()
    model = with_experts(build_model(TINY.shape(8), seed=0), num_experts=1, top_k=1, ff=8)
    loss, accuracy = recall(model, table, TINY.facts_per_row)
    assert loss == pytest.approx(torch.log(torch.tensor(24.0)).item(), rel=0.2)  # untrained
    assert 0 <= accuracy <= 0.5


def test_an_unknown_variant_is_a_key_error():
    with pytest.raises(KeyError):
        train_on_facts("sparse", seed=0, recipe=dataclasses.replace(TINY, steps=1))
