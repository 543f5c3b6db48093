"""How far a quantized tensor is from the original: relative Frobenius error and MSE."""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class QuantError:
    relative: float  # ||W - W_hat||_F / ||W||_F
    mse: float  # mean((W - W_hat)^2)


def quant_error(original: torch.Tensor, approx: torch.Tensor) -> QuantError:
    """The error of using `approx` (e.g. quantized then dequantized) in place of `original`."""
    if original.shape != approx.shape:
        raise ValueError(
            f"shapes differ: original {tuple(original.shape)}, approx {tuple(approx.shape)}"
        )
    original, diff = original.double(), original.double() - approx.double()
    norm = original.norm()
    relative = diff.norm() / norm if norm > 0 else diff.norm()  # an all-zero original: absolute
    return QuantError(relative=float(relative), mse=float(diff.pow(2).mean()))
