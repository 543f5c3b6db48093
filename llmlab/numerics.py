"""How far one tensor is from another: the one way the course measures it."""

import torch


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """||got - expected|| / ||expected|| (Frobenius norms, in float64): 0 for the same numbers.
    Against an all-zero `expected`, the absolute error ||got||."""
    if got.shape != expected.shape:
        raise ValueError(f"shapes differ: got {tuple(got.shape)}, expected {tuple(expected.shape)}")
    expected = expected.detach().double()
    difference = (got.detach().double() - expected).norm()
    norm = expected.norm()
    return float(difference / norm if norm > 0 else difference)
