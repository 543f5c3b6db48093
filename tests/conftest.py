"""Fixtures shared by several test files."""

import sys

import pytest

from llmlab.distributed.equivalence import (
    SMOKE_SHAPE,
    global_batches,
    reference_parameters,
)


@pytest.fixture(scope="module")
def smoke_reference():
    """Parameters after 5 SGD steps of the smoke model in one process, on the whole batch of 8
    sequences: what every model-parallel run of the same batches must end with."""
    return reference_parameters(global_batches(5, 8, SMOKE_SHAPE), SMOKE_SHAPE, "sgd")[0]



# transformers swaps these for no-ops while it loads a model and puts them back after; a test that
# leaves one swapped spoils every later test on its worker (models come out untied or unset).
_SWAPPED_WHILE_LOADING = ("tie_weights", "init_weights")


@pytest.fixture(autouse=True)
def _transformers_left_as_found():
    """Fail the test that leaves transformers' model-building methods swapped, and restore them."""
    modeling = sys.modules.get("transformers.modeling_utils")
    before = {name: getattr(modeling.PreTrainedModel, name) for name in _SWAPPED_WHILE_LOADING
              } if modeling else {}  # fmt: skip
    yield
    left = [name for name, method in before.items()
            if getattr(modeling.PreTrainedModel, name) is not method]  # fmt: skip
    for name in left:
        setattr(modeling.PreTrainedModel, name, before[name])
    assert not left, f"the test left PreTrainedModel.{left} swapped (two loads at once?)"
