"""The cubic sparsity schedule of Zhu and Gupta, and its refusals."""

import pytest

from llmlab.prune import (
    cubic_sparsity,
    pruning_steps,
)


def test_cubic_schedule_follows_zhu_and_gupta():
    kwargs = dict(final_sparsity=0.8, start_step=100, end_step=200, initial_sparsity=0.1)
    assert cubic_sparsity(50, **kwargs) == 0.0  # dense before pruning starts
    assert cubic_sparsity(100, **kwargs) == pytest.approx(0.1)
    assert cubic_sparsity(150, **kwargs) == pytest.approx(0.8 - 0.7 * 0.5**3)
    assert cubic_sparsity(200, **kwargs) == cubic_sparsity(999, **kwargs) == 0.8
    curve = [cubic_sparsity(step, **kwargs, every=10) for step in range(100, 201)]
    assert curve == sorted(curve)
    assert curve[10:20] == [curve[10]] * 10  # held between pruning steps
    assert pruning_steps(100, 200, every=30) == [100, 130, 160, 190, 200]
    # Fast first: the first tenth of the steps does more than a tenth of the work.
    assert cubic_sparsity(110, **kwargs) - 0.1 > 0.2 * (0.8 - 0.1)


@pytest.mark.parametrize("kwargs", [dict(final_sparsity=1.0, start_step=0, end_step=10),
                                    dict(final_sparsity=0.5, start_step=10, end_step=10),
                                    dict(final_sparsity=0.2, start_step=0, end_step=10,
                                         initial_sparsity=0.5),
                                    dict(final_sparsity=0.5, start_step=0, end_step=10, every=0)])
def test_cubic_schedule_refuses_bad_settings(kwargs):
    with pytest.raises(ValueError):
        cubic_sparsity(5, **kwargs)
