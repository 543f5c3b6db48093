"""Which GPUs a set-up fits on: yes up to 90% of the memory, tight up to 100%, no beyond; the
GPUs of each memory size by name; a table of both; a size that is not a positive number is
refused."""

import math

import pytest

from llmlab import memory
from llmlab.memory import GB, MemoryEstimate, TrainingSetup, estimate_memory
from llmlab.models import preset


def needing(gb: float) -> MemoryEstimate:
    """An estimate whose total is `gb` GB."""
    return MemoryEstimate(preset("tiny"), TrainingSetup(), {"weights": gb * GB}, "forward",
                          ("weights",), overhead=0)


def test_fits_says_yes_tight_or_no():
    estimate = estimate_memory("llama-1b", batch=4, seq=2048)  # about 36 GB with the context
    assert memory.fits(estimate, 80) == "yes"
    assert memory.fits(estimate, estimate.total / GB / 0.95) == "tight"
    assert memory.fits(estimate, 24) == "no"
    with pytest.raises(ValueError, match="positive"):
        memory.fits(estimate, 0)


def test_the_bounds_of_yes_and_tight_are_90_and_100_percent():
    assert [memory.fits(needing(gb), 80) for gb in (72, 72.1, 80, 80.1)] == [
        "yes", "tight", "tight", "no"]


@pytest.mark.parametrize("size", [-80, math.nan])
def test_a_gpu_size_that_is_not_a_positive_number_is_refused(size):
    with pytest.raises(ValueError, match=f"GPU memory must be a positive number of GB, got {size}"):
        memory.fits(needing(1), size)


def test_gpus_with_names_the_gpus_of_that_memory_size():
    assert memory.gpus_with(80) == ["A100 SXM 80GB", "H100 PCIe", "H100 SXM"]
    assert memory.gpus_with(141) == ["H200"]
    assert memory.gpus_with(12) == []


def test_fit_table_shows_every_size():
    estimate = estimate_memory("llama-7b", batch=8, seq=2048, zero=3, gpus=8)
    fit = memory.fit_table({"7b": estimate})
    assert all(f"{size} GB" in fit for size in memory.GPU_SIZES_GB)
    assert "H200" in fit and "T4" in fit


def test_fit_table_has_a_row_per_set_up_and_a_column_per_size():
    table = memory.fit_table({"small": needing(20), "large": needing(46)}, sizes=(12, 24, 48))
    rows = [[cell.strip() for cell in line.split("|")] for line in table.splitlines()[2:4]]
    assert rows == [["small", "20.0", "no", "yes", "yes"], ["large", "46.0", "no", "no", "tight"]]
    assert "  12 GB: -" in table and "  48 GB: L40S" in table  # no GPU has 12 GB
