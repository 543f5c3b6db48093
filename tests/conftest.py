"""Fixtures shared by several test files, and the order the test command runs them in."""

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


# Labs 06 and 07 start from the model Lab 03 trains; run Lab 03's notebook first, so that on two
# workers it trains while the unit tests run, and the later labs load its model instead of waiting
# (llmlab.course.pretrained) or training a copy of their own.
FIRST = "solutions/03_training.ipynb"


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.nodeid.split("::")[0] != FIRST)  # a stable sort
