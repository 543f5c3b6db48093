"""Learning-rate schedules: warm-up then cosine down to the floor at the last step, constant and
cyclical."""


import pytest
from helpers.train_fakes import (
    config,
)

from llmlab.train import (
    learning_rate,
)

# ---------------------------------------------------------------- schedules and settings


def test_warmup_then_cosine_reaches_the_floor_at_the_last_step():
    c = config(max_steps=110, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    assert learning_rate(0, c) == pytest.approx(0.1)  # (0 + 1) / 10 of the peak
    assert learning_rate(9, c) == pytest.approx(1.0)
    assert learning_rate(60, c) == pytest.approx(0.55)  # half-way down the cosine
    assert learning_rate(110, c) == pytest.approx(0.1)
    assert all(learning_rate(s, c) >= learning_rate(s + 1, c) for s in range(10, 110))


def test_constant_and_cyclical_schedules():
    assert learning_rate(77, config(schedule="constant", lr=0.5)) == 0.5
    c = config(schedule="cyclical", lr=1.0, min_lr_ratio=0.2, cycle_steps=10)
    assert [learning_rate(s, c) for s in (0, 5, 10, 15)] == pytest.approx([0.2, 1.0, 0.2, 1.0])
