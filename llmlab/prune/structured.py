"""Structured pruning of MLP neurons: remove whole hidden units, so the matrices really shrink.

A neuron j of an MLP is column j of the input projection(s) (GPT-2's c_fc; Llama's gate_proj
and up_proj) and row j of the output projection (c_proj; down_proj). Zeroing its output weights
silences it (the masked model); slicing it out of all of them gives a smaller model that computes
the same function. `transformers` configs hold one MLP width for every layer, so every layer
keeps the same number of neurons: otherwise the smaller model would not reload.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from llmlab.models import input_dim, named_blocks, transformer_blocks
from llmlab.models.finite import require_finite
from llmlab.prune.keep import current_weight
from llmlab.prune.masks import check_sparsity


@dataclass(frozen=True)
class MlpLayout:
    inputs: tuple[str, ...]  # projections into the hidden units
    output: str  # the projection out of them
    width_key: str  # the config field that holds the hidden width


MLP_LAYOUTS = {
    "gpt2": MlpLayout(("c_fc",), "c_proj", "n_inner"),
    "llama": MlpLayout(("gate_proj", "up_proj"), "down_proj", "intermediate_size"),
}


def _layout(model: nn.Module) -> MlpLayout:
    family = getattr(model.config, "model_type", None)
    if family not in MLP_LAYOUTS:
        raise TypeError(f"MLP neuron removal knows {sorted(MLP_LAYOUTS)} models, not {family!r}")
    return MLP_LAYOUTS[family]


def output_dim(module: nn.Module) -> int:
    return 1 - input_dim(module)  # weights are 2-D: the other dimension is the outputs


def neuron_scores(model: nn.Module) -> list[torch.Tensor]:
    """Per block, one score per hidden neuron: the product of the L2 norms of its weights in each
    projection (a neuron matters only if the weights into it and out of it are both large)."""
    layout = _layout(model)
    scores = []
    for block in transformer_blocks(model):
        output = block.mlp.get_submodule(layout.output)
        score = _neuron_norms(output, input_dim(output))
        for name in layout.inputs:
            module = block.mlp.get_submodule(name)
            score = score * _neuron_norms(module, output_dim(module))
        scores.append(score)
    return scores


def _neuron_norms(module: nn.Module, neuron_dim: int) -> torch.Tensor:
    """One L2 norm per neuron: over the weight's other dimension."""
    return current_weight(module).norm(dim=1 - neuron_dim)


def kept_neurons(model: nn.Module, sparsity: float, scores=None) -> list[torch.Tensor]:
    """Per block, the sorted indices of the neurons to keep: the same number in every block
    (round((1 - sparsity) * width)), the highest scores (default: `neuron_scores`)."""
    scores = neuron_scores(model) if scores is None else scores
    width = scores[0].numel()
    keep = round((1 - check_sparsity(sparsity)) * width)
    if keep == 0:
        raise ValueError(
            f"sparsity {sparsity} would remove every one of the {width} MLP neurons of each "
            "layer: lower it so at least one neuron stays"
        )
    # a NaN score would rank above every number and its neuron be kept: refused, by block
    return [
        require_finite(layer_scores, f"the neuron-score tensor of block {index}")
        .topk(keep)
        .indices.sort()
        .values
        for index, layer_scores in enumerate(scores)
    ]


def neuron_masks(model: nn.Module, kept: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keep-masks (for `apply_masks`) that zero the output weights of the removed neurons."""
    layout = _layout(model)
    masks = {}
    for (block_name, block), keep in zip(named_blocks(model), kept, strict=True):
        output = block.mlp.get_submodule(layout.output)
        alive = torch.zeros(output.weight.shape[input_dim(output)], dtype=torch.bool)
        alive[keep] = True
        shape = [1, 1]
        shape[input_dim(output)] = -1
        mask = alive.view(shape).expand_as(output.weight).clone()
        masks[f"{block_name}.mlp.{layout.output}.weight"] = mask
    return masks


def sliced(module: nn.Module, neuron_dim: int, keep: torch.Tensor) -> nn.Module:
    """A new Linear or Conv1D holding only the kept neurons along `neuron_dim` of its weight."""
    weight = current_weight(module).index_select(neuron_dim, keep.to(module.weight.device))
    bias = None if module.bias is None else module.bias.detach()
    if bias is not None and neuron_dim == output_dim(module):
        bias = bias.index_select(0, keep.to(bias.device))  # a bias belongs to an output feature
    if isinstance(module, Conv1D):
        smaller = Conv1D(nf=weight.shape[1], nx=weight.shape[0])
    else:
        smaller = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    smaller = smaller.to(device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        smaller.weight.copy_(weight)
        if bias is not None:
            smaller.bias.copy_(bias)
    return smaller


def check_neuron_indices(keep: torch.Tensor, width: int, block: int) -> None:
    """Distinct indices of neurons from 0 to width - 1, or a ValueError that says why."""
    if keep.numel() and (keep.min() < 0 or keep.max() >= width):
        wrong = int(keep.max() if keep.max() >= width else keep.min())
        raise ValueError(
            f"block {block}: kept neuron {wrong} does not exist, the MLP has {width} neurons "
            f"(0 to {width - 1}): were the indices chosen before this model was shrunk (removing "
            "twice)? Choose them again on the model as it is now: kept_neurons(model, sparsity)"
        )
    if keep.unique().numel() != keep.numel():
        raise ValueError(f"block {block}: a kept neuron index appears twice; each neuron is kept "
                         "once (kept_neurons gives distinct indices)")


def remove_mlp_neurons(model: nn.Module, kept: list[torch.Tensor]) -> nn.Module:
    """Slice every MLP down to its kept neurons, in place, and set the config's MLP width, so
    save_pretrained / from_pretrained give the smaller model. Masks on the MLP are folded in."""
    layout = _layout(model)
    blocks = transformer_blocks(model)
    widths = {keep.numel() for keep in kept}
    if len(kept) != len(blocks) or len(widths) != 1:
        raise ValueError(
            f"need one index list per block ({len(blocks)}), all of one length (the config has "
            f"one MLP width), got {len(kept)} lists of lengths {sorted(widths)}"
        )
    # every block's indices are checked before any is sliced: an error leaves the model as it was
    for index, (block, keep) in enumerate(zip(blocks, kept, strict=True)):
        output = block.mlp.get_submodule(layout.output)
        check_neuron_indices(keep, output.weight.shape[input_dim(output)], index)
    for block, keep in zip(blocks, kept, strict=True):
        for name in layout.inputs:
            module = block.mlp.get_submodule(name)
            setattr(block.mlp, name, sliced(module, output_dim(module), keep))
        output = block.mlp.get_submodule(layout.output)
        setattr(block.mlp, layout.output, sliced(output, input_dim(output), keep))
    setattr(model.config, layout.width_key, widths.pop())
    return model
