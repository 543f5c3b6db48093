"""Keeping masks on a model through training, with torch.nn.utils.prune.

`custom_from_mask` moves the weight to `weight_orig` (the parameter the optimizer updates) and
recomputes `weight = weight_orig * weight_mask` before every forward pass. A pruned entry's
gradient through the mask is then exactly zero, so AdamW's moments there stay zero, and the weight
the model computes with stays exactly zero whatever decoupled weight decay does to `weight_orig`.
Zeroing the weights once would not survive the first AdamW step: their gradient is not zero.
"""

from collections.abc import Mapping

import torch
from torch import nn
from torch.nn.utils import prune

from llmlab.prune.targets import prunable_weights


def current_weight(module: nn.Module, name: str = "weight") -> torch.Tensor:
    """The weight the module computes with now: weight_orig * weight_mask when it is masked.

    (The `weight` attribute of a masked module is refreshed only by the next forward pass, so
    right after an optimizer step it is stale.)"""
    if hasattr(module, f"{name}_mask"):
        return (getattr(module, f"{name}_orig") * getattr(module, f"{name}_mask")).detach()
    return getattr(module, name).detach()


def _owner(model: nn.Module, parameter_name: str, source: str) -> tuple[nn.Module, str]:
    module_name, _, attribute = parameter_name.rpartition(".")
    try:
        module = model.get_submodule(module_name)
    except AttributeError:
        module = None
    if module is None or not hasattr(module, attribute):
        raise ValueError(
            f"{source}: the mask {parameter_name!r} names no weight of this "
            f"{type(model).__name__}: were the masks made for another model?"
        )
    return module, attribute


def fit_masks(
    model: nn.Module, masks: Mapping[str, torch.Tensor], source: str = "masks"
) -> list[tuple[nn.Module, str, torch.Tensor]]:
    """(module, attribute, mask) for each mask, after checking that it names a weight of `model`
    with the weight's shape, and is not the matrix a tied LM head shares with the embedding."""
    fitted = []
    for name, mask in masks.items():
        mask = torch.as_tensor(mask)  # numpy or nested lists are masks too (a learner's, say)
        module, attribute = _owner(model, name, source)
        if module in (model.get_input_embeddings(), model.get_output_embeddings()):
            prunable_weights(model, include_embeddings=True)  # refuses a tied LM head, says why
        weight = getattr(module, attribute)
        if mask.shape != weight.shape:
            raise ValueError(
                f"{source}: the mask for {name} is {tuple(mask.shape)} but the weight is "
                f"{tuple(weight.shape)}: were the masks made for another model (size, preset)?"
            )
        fitted.append((module, attribute, mask.to(device=weight.device, dtype=weight.dtype)))
    return fitted


def apply_masks(model: nn.Module, masks: Mapping[str, torch.Tensor]) -> nn.Module:
    """Mask the named weights ({"...c_fc.weight": keep-mask}) and keep them masked from now on.

    Masking a masked weight again multiplies the masks (torch.nn.utils.prune's rule): a pruned
    entry never comes back, so gradual pruning only ever removes more.
    """
    # Every mask is checked before any is applied: a bad mask file leaves the model untouched.
    for module, attribute, mask in fit_masks(model, masks):
        prune.custom_from_mask(module, attribute, mask)
    return model


def masked_weights(model: nn.Module) -> list[str]:
    """Names of the weights that carry a mask now."""
    return [
        f"{module_name}.{name[: -len('_mask')]}".lstrip(".")
        for module_name, module in model.named_modules()
        for name, _ in module.named_buffers(recurse=False)
        if name.endswith("_mask")
    ]


def make_permanent(model: nn.Module) -> nn.Module:
    """Fold every mask into its weight (weight = weight_orig * mask, a plain parameter again):
    the model then saves, loads and counts like any other. Training no longer keeps the zeros."""
    for name in masked_weights(model):
        module, attribute = _owner(model, name, "make_permanent")
        prune.remove(module, attribute)
    return model
