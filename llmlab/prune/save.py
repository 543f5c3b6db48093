"""Saving a pruned model in Hugging Face format, and saving and loading its masks."""

import shutil
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from llmlab.data.atomic import atomic_file, replace_folder, temporary_sibling
from llmlab.prune.keep import current_weight, fit_masks, masked_weights


def pruned_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict with every mask folded in (weight_orig * mask saved as `weight`):
    what `make_permanent` would give, without changing the model in memory."""
    state = model.state_dict()
    for name in masked_weights(model):
        module_name, _, attribute = name.rpartition(".")
        state.pop(f"{name}_orig")
        state.pop(f"{name}_mask")
        state[name] = current_weight(model.get_submodule(module_name), attribute)
    return state


def save_pruned(model: nn.Module, folder: str | Path, tokenizer=None) -> Path:
    """save_pretrained with the masks made permanent, so `from_pretrained` loads it as a plain
    model (zeros included). Written under a temporary name and renamed: never half a model.
    The model in memory keeps its masks, so training can go on."""
    final = Path(folder)
    temporary = temporary_sibling(final)
    try:
        model.save_pretrained(temporary, state_dict=pruned_state_dict(model))
        if tokenizer is not None:
            tokenizer.save_pretrained(temporary)
        replace_folder(temporary, final)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)  # gone already after a successful rename
    return final


def save_masks(masks: Mapping[str, torch.Tensor], path: str | Path) -> Path:
    """Keep-masks as safetensors, one byte per entry, under the names of the weights."""
    with atomic_file(path) as tmp:
        save_file({name: mask.to(torch.bool).contiguous() for name, mask in masks.items()}, tmp)
    return Path(path)


def load_masks(path: str | Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """Masks saved by `save_masks`, checked against `model`: a file made for another model is
    refused with the name and shape that do not fit."""
    masks = load_file(path)
    fit_masks(model, masks, source=str(path))
    return masks
