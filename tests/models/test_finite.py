"""NaN and inf are refused with the tensor's name, how many there are and where the first is;
finite numbers pass through untouched. (Its callers' refusals, the model left unchanged:
tests/quant/test_model.py, tests/prune/test_wanda.py.)"""

import math

import pytest
import torch
from torch import nn

from llmlab.models.finite import require_finite, require_finite_parameters


def test_a_finite_tensor_comes_back_as_it_is():
    tensor = torch.tensor([[0.0, -1e38], [3e38, 1e-45]])  # extreme, but finite
    assert require_finite(tensor, "x") is tensor


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_both_infinities_are_refused_with_the_count_and_the_first_index(bad):
    tensor = torch.zeros(3, 4)
    tensor[1, 2] = tensor[2, 0] = bad
    with pytest.raises(ValueError, match=rf"the scores holds 2 NaN or inf value\(s\), the first at "
                       rf"index \(1, 2\) \({bad}\): find where it came from"):
        require_finite(tensor, "the scores")


def test_every_parameter_is_checked_by_its_name():
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    require_finite_parameters(model)  # all finite: nothing raised
    with torch.no_grad():
        model[1].bias[1] = math.inf
    with pytest.raises(ValueError, match=r"^1\.bias holds 1 NaN or inf value\(s\), the first at "
                       r"index \(1,\) \(inf\)"):
        require_finite_parameters(model)
