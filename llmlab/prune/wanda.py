"""Wanda (Sun, Liu, Bair & Kolter 2023, "A Simple and Effective Pruning Approach for Large
Language Models"): score each weight by |W_ij| * ||X_j||_2, its magnitude times the L2 norm of
the input feature it multiplies over calibration tokens, and prune the lowest scores within each
output (each output row loses the same fraction). A small weight on a feature with large
activations matters; magnitude pruning alone would drop it. No retraining, no weight updates.
"""

from collections.abc import Iterable

import torch
from torch import nn

from llmlab.models import input_dim, named_blocks
from llmlab.models.finite import require_finite, require_finite_parameters
from llmlab.models.observe import observe_inputs
from llmlab.prune.keep import apply_masks, current_weight
from llmlab.prune.masks import check_sparsity
from llmlab.prune.targets import prunable_weights


@torch.no_grad()
def input_norms(
    model: nn.Module, modules: dict[str, nn.Module], batches: Iterable[torch.Tensor]
) -> dict[str, torch.Tensor]:
    """{name: ||X_j||_2 per input feature j} of each module's input over all calibration tokens
    (batches of token ids, (batch, seq))."""
    sums = {name: torch.zeros(module.weight.shape[input_dim(module)], dtype=torch.float64,
                              device=module.weight.device)
            for name, module in modules.items()}

    def accumulate(name: str, x: torch.Tensor) -> None:
        sums[name] += x.double().pow(2).sum(0)  # float64: sums over many tokens

    observe_inputs(model, modules, batches, accumulate)
    return {name: total.sqrt().float() for name, total in sums.items()}


def wanda_mask(weight: torch.Tensor, norms: torch.Tensor, dim: int, sparsity: float):
    """Keep-mask: in each output (the weight's other dimension than `dim`), drop the
    int(sparsity * inputs) lowest |W| * norms (norms along `dim`, the input features): rounded
    down, as the paper's code does."""
    prune_count = int(check_sparsity(sparsity) * weight.shape[dim])
    require_finite(weight, "the weight")  # topk ranks NaN above every number: never pruned
    require_finite(norms, "the input norms")
    shape = [1, 1]
    shape[dim] = -1
    scores = (weight.abs() * norms.view(shape)).movedim(dim, -1)  # one row per output
    keep = torch.ones_like(scores, dtype=torch.bool)
    if prune_count:
        keep.scatter_(-1, scores.topk(prune_count, dim=-1, largest=False).indices, False)
    return keep.movedim(-1, dim)


def wanda_prune(
    model: nn.Module, sparsity: float, batches: list[torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Prune every prunable matrix with Wanda, block by block, and return the masks (applied and
    kept, as `apply_masks` does). Each block's inputs are measured after the blocks before it
    were pruned, as the paper does, so later layers see the errors of earlier ones."""
    check_sparsity(sparsity)
    if not batches:
        raise ValueError("Wanda needs calibration batches of token ids: got none")
    require_finite_parameters(model)
    weights = prunable_weights(model)
    masks = {}
    for block_name, _ in named_blocks(model):
        here = {n: m for n, m in weights.items() if n.startswith(f"{block_name}.")}
        norms = input_norms(model, here, batches)
        block_masks = {name: wanda_mask(current_weight(module), norms[name], input_dim(module),
                                        sparsity)
                       for name, module in here.items()}
        apply_masks(model, block_masks)
        masks.update(block_masks)
    return masks
