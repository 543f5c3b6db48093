"""One optimizer vocabulary, in llmlab/memory/optimizers.py: every name a package takes is one
the planner prices, and no other module keeps an optimizer table of its own."""

import pytest
import torch
from helpers.definitions import PACKAGE, module_names

from llmlab.memory.optimizers import (
    DEEPSPEED_OPTIMIZERS,
    OPTIMIZER_STATES,
    REFERENCE_OPTIMIZERS,
    TRAINER_OPTIMIZERS,
    optimizer_by_name,
)


def test_the_trainer_deepspeed_and_the_harness_take_names_the_planner_prices():
    taken = set(TRAINER_OPTIMIZERS) | set(DEEPSPEED_OPTIMIZERS) | set(REFERENCE_OPTIMIZERS)
    assert taken <= set(OPTIMIZER_STATES)


def test_the_reference_optimizers_keep_the_states_their_names_promise():
    parameter = torch.nn.Parameter(torch.ones(3))
    for name, (optimizer_class, options) in REFERENCE_OPTIMIZERS.items():
        optimizer = optimizer_class([parameter], **options)
        parameter.grad = torch.ones(3)
        optimizer.step()
        tensors = [v for v in optimizer.state[parameter].values() if v.shape == parameter.shape]
        assert len(tensors) == OPTIMIZER_STATES[name], name


def test_muon_keeps_the_one_state_its_name_promises_and_is_built_from_a_model():
    matrix = torch.nn.Parameter(torch.ones(3, 2))
    muon = torch.optim.Muon([matrix])
    matrix.grad = torch.ones(3, 2)
    muon.step()
    tensors = [v for v in muon.state[matrix].values() if v.shape == matrix.shape]
    assert len(tensors) == OPTIMIZER_STATES["muon"]  # its momentum
    with pytest.raises(ValueError, match="build_optimizer"):  # it needs to see the blocks
        optimizer_by_name([matrix], "muon")


def test_optimizer_by_name_keeps_a_rate_of_zero_and_defaults_only_a_missing_one():
    parameters = [torch.nn.Parameter(torch.zeros(2))]
    assert optimizer_by_name(parameters, "adamw").defaults["lr"] == 1e-4
    assert optimizer_by_name(parameters, "sgd", lr=0.0).defaults["lr"] == 0.0


def test_no_other_module_keeps_an_optimizer_table():
    """A second table named OPTIMIZERS (or OPTIMIZER_...) would be a second vocabulary."""
    home = "llmlab/memory/optimizers.py"
    assert {where.split(":")[0] for where in module_names(PACKAGE, "OPTIMIZER")} == {home}
