"""Saving a pruned model in Hugging Face format, and saving and loading its masks. Each carries
the sha256 of its files (checksums.sha256 in the folder, masks.safetensors.sha256 beside a mask
file), checked on load as checkpoints' are: a flipped bit would change which weights are pruned."""

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from llmlab.files import (
    atomic_file,
    atomic_folder,
    checksums_beside,
    verify_checksums,
    verify_folder,
    write_checksums,
    write_folder_checksums,
)
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
    model (zeros included), and the files' checksums. Written under a temporary name and renamed:
    never half a model. The model in memory keeps its masks, so training can go on."""
    with atomic_folder(folder) as temporary:
        model.save_pretrained(temporary, state_dict=pruned_state_dict(model))
        if tokenizer is not None:
            tokenizer.save_pretrained(temporary)
        write_folder_checksums(temporary)
    return Path(folder)


def load_pruned(folder: str | Path) -> nn.Module:
    """A model saved by `save_pruned`, loaded with `from_pretrained` once its files verify."""
    from transformers import AutoModelForCausalLM

    remedy = "Save it again with llmlab.prune.save_pruned"
    verify_folder(folder, f"pruned model {folder}", remedy)
    try:  # safetensors only: a pickled pytorch_model.bin would be unpickled, which can run code
        return AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True)
    except OSError as error:
        raise ValueError(f"pruned model {folder}: {error} Only safetensors weights are loaded "
                         f"(unpickling can run code). {remedy}") from None


def save_masks(masks: Mapping[str, torch.Tensor], path: str | Path) -> Path:
    """Keep-masks as safetensors, one byte per entry, under the names of the weights; their
    sha256 beside them."""
    path = Path(path)
    with atomic_file(path) as tmp:
        save_file({name: mask.to(torch.bool).contiguous() for name, mask in masks.items()}, tmp)
    write_checksums(checksums_beside(path), [path.name])
    return path


def load_masks(path: str | Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """Masks saved by `save_masks`, after checking their sha256 and that they fit `model`: a file
    made for another model is refused with the name and shape that do not fit."""
    path = Path(path)
    verify_checksums(checksums_beside(path), f"mask file {path}", "Save the masks again with "
                     "llmlab.prune.save_masks", [path.name])
    masks = load_file(path)
    fit_masks(model, masks, source=str(path))
    return masks
