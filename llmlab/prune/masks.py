"""Pruning masks (True = keep): magnitude, layer-wise or global, and N:M.

A mask prunes exactly round(sparsity * size) entries, the smallest by |w|. torch.topk picks
them, as torch.nn.utils.prune does: a plain threshold (|w| < kth value) would prune too few
when several weights tie at the threshold, and "<=" too many.
"""

import math
import numbers
from collections.abc import Iterable, Mapping

import torch
from torch import nn

from llmlab.models import input_dim
from llmlab.models.finite import require_finite
from llmlab.prune.keep import current_weight
from llmlab.prune.targets import prunable_weights


def check_sparsity(sparsity: float) -> float:
    """A fraction of weights to remove: 0 keeps all, 0.9 removes nine in ten."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, numbers.Real):
        raise TypeError(f"sparsity must be a number in [0, 1), got {sparsity!r}")
    if not (0 <= sparsity < 1):  # also refuses NaN
        raise ValueError(
            f"sparsity must be in [0, 1) (the fraction of weights set to zero), got {sparsity}: "
            "1 would remove every weight; give a percentage as a fraction (50% -> 0.5)"
        )
    return float(sparsity)


def smallest_mask(scores: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Keep-mask (bool, shaped like `scores`) that drops the round(sparsity * size) smallest."""
    prune_count = round(check_sparsity(sparsity) * scores.numel())
    keep = torch.ones(scores.numel(), dtype=torch.bool, device=scores.device)
    if prune_count:
        keep[torch.topk(scores.flatten(), prune_count, largest=False).indices] = False
    return keep.view(scores.shape)


def _weights(model: nn.Module, names: Iterable[str] | None) -> dict[str, torch.Tensor]:
    """{name: weight as the model uses it now} (default: every matrix of `prunable_weights`)."""
    modules = prunable_weights(model)
    names = list(modules) if names is None else list(names)
    if any(name not in modules for name in names):
        modules = prunable_weights(model, include_embeddings=True)  # refuses a tied LM head
    missing = [name for name in names if name not in modules]
    if missing:
        raise ValueError(
            f"{missing[0]!r} is not a prunable matrix of this model: the names come from "
            "llmlab.prune.prunable_weights(model) (Linear and Conv1D weights, and embeddings)"
        )
    # NaN would never be pruned (topk ranks it above every number): refused, by name
    return {name: require_finite(current_weight(modules[name]), name) for name in names}


def layerwise_masks(
    model: nn.Module, sparsity: float, names: Iterable[str] | None = None
) -> dict[str, torch.Tensor]:
    """Each matrix loses the same fraction: its own smallest |w|."""
    return {name: smallest_mask(w.abs(), sparsity) for name, w in _weights(model, names).items()}


def global_masks(
    model: nn.Module, sparsity: float, names: Iterable[str] | None = None
) -> dict[str, torch.Tensor]:
    """One ranking of |w| over all the matrices together: a matrix of large weights keeps more,
    one of small weights loses more (the same masks as torch.nn.utils.prune.global_unstructured
    with L1Unstructured, given the tensors in the same order)."""
    weights = _weights(model, names)
    if not weights:
        raise ValueError("no weights to prune")
    flat = torch.cat([w.abs().flatten() for w in weights.values()])
    keep = smallest_mask(flat, sparsity)
    masks, start = {}, 0
    for name, weight in weights.items():
        masks[name] = keep[start : start + weight.numel()].view(weight.shape)
        start += weight.numel()
    return masks


def nm_mask(weight: torch.Tensor, n: int = 2, m: int = 4, dim: int = -1) -> torch.Tensor:
    """Keep the n largest |w| in every group of m consecutive entries along `dim` (the input
    features): the pattern sparse tensor cores accelerate (2:4 on NVIDIA Ampere and later)."""
    if not (isinstance(n, int) and isinstance(m, int) and 0 < n < m):
        raise ValueError(f"N:M needs whole numbers 0 < n < m (e.g. 2:4), got {n}:{m}")
    size = weight.shape[dim]
    if size % m:
        raise ValueError(
            f"N:M groups of m={m} along a dimension of {size}: {size} is not divisible by {m}. "
            f"Use an m that divides {size}, or leave this tensor out of N:M pruning."
        )
    # NaN would be kept in its group (topk ranks it above every number): refused
    moved = require_finite(weight.detach(), "the weight").abs().movedim(dim, -1)
    groups = moved.reshape(*moved.shape[:-1], size // m, m)
    keep = torch.zeros_like(groups, dtype=torch.bool)
    keep.scatter_(-1, groups.topk(n, dim=-1).indices, True)
    return keep.reshape(moved.shape).movedim(-1, dim)


def nm_masks(model: nn.Module, n: int = 2, m: int = 4) -> dict[str, torch.Tensor]:
    """N:M masks for every prunable matrix, grouped along each layer's input features."""
    masks = {}
    for name, module in prunable_weights(model).items():
        try:
            masks[name] = nm_mask(current_weight(module), n, m, dim=input_dim(module))
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
    return masks


def mask_sparsity(masks: Mapping[str, torch.Tensor]) -> float:
    """The fraction of entries the masks remove, over all of them."""
    total = sum(mask.numel() for mask in masks.values())
    kept = sum(int(mask.sum()) for mask in masks.values())
    return 1 - kept / total if total else math.nan
