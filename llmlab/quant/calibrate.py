"""Calibration capture: the inputs each Linear / Conv1D of a model sees on calibration batches,
the activations GPTQ builds its Hessian from. Recorded with forward pre-hooks, which are removed
afterwards even if the forward fails (llmlab.models.observe), so the model is left as it was."""

from collections.abc import Iterable

import torch
from torch import nn

from llmlab.models import BLOCK_MATRIX_TYPES
from llmlab.models.observe import observe_inputs


def check_batches(batches: Iterable[torch.Tensor], window: int | None = None) -> list:
    """The calibration batches of token ids (batch, seq) as a list, refused when there are none
    or when one is shorter than `window` tokens (the sequence length asked for)."""
    batches = list(batches)
    if not batches:
        raise ValueError(
            "calibration needs batches of token ids (batch, seq): got none; pass a few windows "
            "of the training corpus (e.g. 8 x 256 tokens)"
        )
    for index, ids in enumerate(batches):
        if ids.dim() != 2:
            raise ValueError(
                f"calibration batch {index} has shape {tuple(ids.shape)}: expected token ids "
                "shaped (batch, seq)"
            )
        if window is not None and ids.shape[1] < window:
            raise ValueError(
                f"calibration batch {index} has {ids.shape[1]} tokens per row, fewer than one "
                f"window of {window}: give longer sequences or ask for a shorter window"
            )
    return batches


def find_layers(model: nn.Module, names: Iterable[str]) -> dict[str, nn.Module]:
    """{name: module} for these module names, each a Linear or a Conv1D of `model`."""
    modules = dict(model.named_modules())
    missing = [name for name in names if name not in modules]
    if missing:
        known = [name for name, module in modules.items() if isinstance(module, BLOCK_MATRIX_TYPES)]
        raise KeyError(
            f"no module named {', '.join(map(repr, missing))} in this "
            f"{type(model).__name__}: its Linear/Conv1D layers are e.g. {', '.join(known[:4])}"
        )
    wrong = [name for name in names if not isinstance(modules[name], BLOCK_MATRIX_TYPES)]
    if wrong:
        raise TypeError(
            f"{', '.join(map(repr, wrong))} not a Linear or Conv1D: only those have a weight "
            "matrix to quantize"
        )
    return {name: modules[name] for name in names}


@torch.no_grad()
def record_inputs(
    model: nn.Module,
    names: Iterable[str],
    batches: Iterable[torch.Tensor],
    window: int | None = None,
) -> dict[str, list[torch.Tensor]]:
    """{name: [inputs (tokens, in_features) per batch]} of the named layers of `model` on the
    calibration batches (token ids (batch, seq), cut to their first `window` tokens if given).
    The model runs in eval mode (no dropout) and gets its training mode back."""
    layers = find_layers(model, list(names))
    batches = check_batches(batches, window)
    recorded = {name: [] for name in layers}

    observe_inputs(model, layers, batches,
                   lambda name, x: recorded[name].append(x.clone()), window)
    return recorded
