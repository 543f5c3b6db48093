"""Fixtures shared by several test files."""

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

