"""How far a quantized tensor is from the original: relative Frobenius error and MSE."""

from dataclasses import dataclass

import torch

from llmlab.numerics import relative_error


@dataclass(frozen=True)
class QuantError:
    relative: float  # ||W - W_hat||_F / ||W||_F (llmlab.numerics.relative_error)
    mse: float  # mean((W - W_hat)^2)


def quant_error(original: torch.Tensor, approx: torch.Tensor) -> QuantError:
    """The error of using `approx` (e.g. quantized then dequantized) in place of `original`."""
    if original.shape != approx.shape:
        raise ValueError(
            f"shapes differ: original {tuple(original.shape)}, approx {tuple(approx.shape)}"
        )
    diff = original.double() - approx.double()
    return QuantError(relative=relative_error(approx, original), mse=float(diff.pow(2).mean()))
