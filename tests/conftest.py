"""Fixtures shared by several test files, and the order the test command runs them in."""

import importlib
import os
import sys

import pytest
from helpers.launch import RecordingBar

from llmlab.distributed.harness.equivalence import (
    SMOKE_SHAPE,
    global_batches,
    reference_parameters,
)


@pytest.fixture(scope="module")
def smoke_reference():
    """Parameters after 5 SGD steps of the smoke model in one process, on the whole batch of 8
    sequences: what every model-parallel run of the same batches must end with."""
    return reference_parameters(global_batches(5, 8, SMOKE_SHAPE), SMOKE_SHAPE, "sgd-momentum")[0]


@pytest.fixture
def bars(monkeypatch):
    """The progress bars launch() and llmlab.jobs' runners make in the test, as RecordingBars."""
    RecordingBar.made = []
    # The module, by name: the package's attribute `launch` is the function.
    launch_module = importlib.import_module("llmlab.distributed.launch")
    monkeypatch.setattr(launch_module, "tqdm", RecordingBar)  # the one bar maker, for both
    return RecordingBar.made


# transformers swaps these for no-ops while it loads a model and puts them back after; a test that
# leaves one swapped spoils every later test on its worker (models come out untied or unset).
_SWAPPED_WHILE_LOADING = ("tie_weights", "init_weights")


@pytest.fixture(autouse=True)
def _transformers_left_as_found():
    """Fail the test that leaves transformers' model-building methods swapped, and restore them."""
    modeling = sys.modules.get("transformers.modeling_utils")
    before = {name: getattr(modeling.PreTrainedModel, name) for name in _SWAPPED_WHILE_LOADING
              } if modeling else {}
    yield
    left = [name for name, method in before.items()
            if getattr(modeling.PreTrainedModel, name) is not method]
    for name in left:
        setattr(modeling.PreTrainedModel, name, before[name])
    assert not left, f"the test left PreTrainedModel.{left} swapped (two loads at once?)"


# Labs 06-10 start from the model Lab 03 trains. Lab 03's notebook runs first, so they load its
# model instead of training a copy of their own (labs asking at once wait for one training:
# llmlab.course.pretrained). Meanwhile the other worker runs the other notebooks (about 7 minutes
# under the test command) and then the exercise checks' and the distributed tests (about 8), work
# enough to last until Lab 03 is done (about 9.5 minutes in, 13 with the CPU capped at AVX2), so
# that no lab waits for its model. Then Labs 06-10, longest first (long units of work are best
# started first), and last the other unit tests: many small files, which end the two workers at
# about the same time (a notebook last kept one core idle for up to two minutes). The Makefile
# turns off xdist's own reordering by size, which would undo this.
FIRST = "solutions/03_training.ipynb"
BEFORE_THE_MODEL = ("tests/course/", "tests/distributed/")
AFTER_THE_MODEL = ("solutions/10_post_training.ipynb", "solutions/08_finetuning.ipynb",
                   "solutions/07_quantization.ipynb", "solutions/09_kernels.ipynb",
                   "solutions/06_pruning.ipynb")


def run_order(item) -> int:
    path = item.nodeid.split("::")[0]
    if path == FIRST:
        return 0
    if path in AFTER_THE_MODEL:
        return 3 + AFTER_THE_MODEL.index(path)
    if path.startswith("solutions/"):
        return 1
    return 2 if path.startswith(BEFORE_THE_MODEL) else 3 + len(AFTER_THE_MODEL)


# nbval reads a cell's output messages only once the cell has run, and ZeroMQ holds about two
# thousand of them meanwhile: the rest are dropped, the last one ("the kernel is idle") with them,
# and nbval then fails the cell that ran ("Timeout ... exceeded waiting for output": Lab 08's 20
# fine-tunes, four minutes of progress bars redrawn ten times a second, tqdm's default). Under the
# test command bars redraw once a second (notebook kernels inherit this), a tenth of the messages.
os.environ.setdefault("TQDM_MININTERVAL", "1")
# And nbval waits at most 5 s for each output message; on a machine busy with the other worker a
# long cell's last messages can come later than that. A minute never fails a cell that ran, and
# still ends one whose kernel has died.
NBVAL_OUTPUT_TIMEOUT_S = 60


def pytest_collection_modifyitems(items):
    items.sort(key=run_order)  # a stable sort: each notebook's cells stay in order
    for item in items:
        if hasattr(item, "output_timeout"):  # nbval's notebook cells
            item.output_timeout = NBVAL_OUTPUT_TIMEOUT_S
