"""Refuse NaN and inf in a model's numbers before they are quantized or pruned: one NaN spreads
to everything computed from it (its whole quantization group, a Hessian, a ranking of scores)
and the result would look like any other, wrong in silence."""

import torch
from torch import nn


def require_finite(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """`tensor` itself, or a ValueError naming it (and its first NaN or inf) if it holds one."""
    bad = ~torch.isfinite(tensor)
    if bad.any():
        first = tuple(bad.nonzero()[0].tolist())
        raise ValueError(
            f"{name} holds {int(bad.sum())} NaN or inf value(s), the first at index {first} "
            f"({tensor[first].item()}): find where it came from (a training run that diverged, "
            "an fp16 overflow, a damaged file) and use finite numbers"
        )
    return tensor


def require_finite_parameters(model: nn.Module) -> None:
    """require_finite on every parameter of `model`, by name. Called before a model is changed
    in place, so that an error leaves it as it was."""
    for name, parameter in model.named_parameters():
        require_finite(parameter.detach(), name)
