"""Pruning: magnitude masks (layer-wise, global), N:M masks and Wanda, kept through training
with torch.nn.utils.prune; the gradual (cubic) schedule; MLP-neuron and attention-head removal
that really shrink GPT-2 and Llama models; sparsity reports; saving in Hugging Face format (with
checksums, checked when loaded back)."""

from llmlab.prune.heads import (
    Heads,
    attention_heads,
    head_masks,
    head_scores,
    kept_heads,
    remove_heads,
)
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
from llmlab.prune.save import (
    load_masks,
    load_pruned,
    pruned_state_dict,
    save_masks,
    save_pruned,
)
from llmlab.prune.schedule import cubic_sparsity, pruning_steps
from llmlab.prune.structured import (
    kept_neurons,
    neuron_masks,
    neuron_scores,
    remove_mlp_neurons,
)
from llmlab.prune.targets import prunable_weights
from llmlab.prune.wanda import input_norms, wanda_mask, wanda_prune

__all__ = [
    "Heads", "SparsityRow", "apply_masks", "attention_heads", "head_masks", "head_scores",
    "kept_heads", "remove_heads", "check_sparsity", "cubic_sparsity", "current_weight",
    "fit_masks", "global_masks", "input_norms", "kept_neurons", "layerwise_masks",
    "load_masks", "load_pruned", "make_permanent", "mask_sparsity", "masked_weights",
    "neuron_masks", "neuron_scores", "nm_mask", "nm_masks", "prunable_weights",
    "pruned_state_dict", "pruning_steps", "remove_mlp_neurons", "save_masks", "save_pruned",
    "smallest_mask", "sparsity_report", "sparsity_table", "wanda_mask", "wanda_prune",
]
