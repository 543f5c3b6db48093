"""The relative and mean squared quantization error."""

import pytest
import torch

from llmlab.quant import quant_error


def test_quant_error():
    original = torch.tensor([3.0, 4.0])
    error = quant_error(original, torch.tensor([3.0, 3.0]))
    assert error.relative == pytest.approx(0.2) and error.mse == pytest.approx(0.5)
    assert quant_error(original, original).relative == 0
    with pytest.raises(ValueError, match="shapes differ"):
        quant_error(original, original[:1])
