"""Pruning: magnitude masks (layer-wise, global) and N:M masks, kept through training with
torch.nn.utils.prune; the gradual (cubic) schedule; sparsity reports; saving pruned models."""

from llmlab.prune.keep import (
    apply_masks,
    current_weight,
    fit_masks,
    make_permanent,
    masked_weights,
)
from llmlab.prune.masks import (
    check_sparsity,
    global_masks,
    layerwise_masks,
    mask_sparsity,
    nm_mask,
    nm_masks,
    smallest_mask,
)
from llmlab.prune.report import SparsityRow, sparsity_report, sparsity_table
from llmlab.prune.save import load_masks, pruned_state_dict, save_masks, save_pruned
from llmlab.prune.schedule import cubic_sparsity, pruning_steps
from llmlab.prune.targets import input_dim, prunable_weights

__all__ = [
    "SparsityRow", "apply_masks", "check_sparsity", "cubic_sparsity", "current_weight",
    "fit_masks", "global_masks", "input_dim", "layerwise_masks", "load_masks", "make_permanent",
    "mask_sparsity", "masked_weights", "nm_mask", "nm_masks", "prunable_weights",
    "pruned_state_dict", "pruning_steps", "save_masks", "save_pruned", "smallest_mask",
    "sparsity_report", "sparsity_table",
]  # fmt: skip
