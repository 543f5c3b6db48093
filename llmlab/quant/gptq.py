"""GPTQ, the reference version (Frantar, Ashkboos, Hoefler & Alistarh 2022, "GPTQ: Accurate
Post-Training Quantization for Generative Pre-trained Transformers", Algorithm 1).

A Linear's output error on calibration inputs X (one column per token) is
||W X - Q X||^2 = sum over rows of (w - q) H (w - q)^T / 2, with H = 2 X X^T. GPTQ quantizes
the columns of W one at a time, left to right; after each it spreads the column's rounding
error over the columns not yet quantized, weighted by the inverse Hessian, so they compensate
for it (the Optimal Brain Surgeon update). The rows of the upper Cholesky factor U of H^-1 hold
exactly those weights, so the update of column i is: err = (w_i - q_i) / U[i, i], then
W[:, j] -= err * U[i, j] for every later column j.
"""

import math
import numbers
from collections.abc import Iterable

import torch
from torch import nn

from llmlab.models.finite import require_finite
from llmlab.quant.formats import Quantized, check_bits, fit_grid, group_count, to_codes


def hessian(inputs: Iterable[torch.Tensor]) -> torch.Tensor:
    """H = 2 X X^T / n over the n calibration tokens (inputs shaped (..., in_features)). The
    1/n only rescales H, which changes neither GPTQ's updates nor its relative damping."""
    total, count = None, 0
    for index, x in enumerate(inputs):
        require_finite(x, f"calibration input {index}")  # one NaN would make all of H NaN
        x = x.detach().reshape(-1, x.shape[-1]).double()  # float64: sums over many tokens
        total = x.T @ x if total is None else total + x.T @ x
        count += x.shape[0]
    if not count:
        raise ValueError(
            "GPTQ needs calibration inputs to build its Hessian: got none (or only empty "
            "tensors); pass the Linear's inputs on a few calibration batches"
        )
    return (2 * total / count).float()


def inverse_hessian_factor(h: torch.Tensor, damp: float = 0.01) -> torch.Tensor:
    """Upper Cholesky factor U of (H + damp * mean(diag H) * I)^-1, with U^T U = that inverse.
    Damping keeps H invertible when calibration tokens are few or features correlated; a dead
    column (its input always 0) gets H[j, j] = 1 so that it does not make H singular."""
    if isinstance(damp, bool) or not isinstance(damp, numbers.Real) or not 0 <= damp < math.inf:
        raise ValueError(f"damp must be a number >= 0 (a fraction of H's mean diagonal added to "
                         f"it; GPTQ uses 0.01), got {damp!r}")
    require_finite(h, "the Hessian (from the calibration inputs)")
    h = h.clone()
    dead = h.diagonal() == 0
    h[dead, dead] = 1
    h.diagonal().add_(damp * h.diagonal().mean())
    try:
        return torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    except torch.linalg.LinAlgError:
        raise ValueError(
            f"the Hessian damped by {damp} of its mean diagonal cannot be inverted (too few or too "
            "correlated calibration tokens for its size): raise damp (e.g. to 0.1) or give more "
            "calibration tokens"
        ) from None


@torch.no_grad()
def gptq(
    weight: torch.Tensor,
    h: torch.Tensor,
    bits: int = 4,
    group_size: int = 128,
    block_size: int | None = None,
    damp: float = 0.01,
    act_order: bool = False,
) -> Quantized:
    """Asymmetric int-`bits` codes of a (out, in) weight, group-wise like `rtn`, chosen to keep
    W X rather than W. `group_size` is an integer (in_features for one group per row).
    Columns go in blocks of `block_size` (default: 128, rounded to whole groups): inside a block
    the error feedback is applied column by column, to the rest of the matrix once per block (one
    matmul, the same result with far less memory traffic). With `act_order`, columns go in order
    of decreasing H[j, j] (the most active inputs first, while most freedom is left to
    compensate), and the group grids are fit up front on the unchanged weight, so that groups
    stay contiguous."""
    check_bits(bits)
    if isinstance(group_size, str):
        raise ValueError(
            f"GPTQ takes an integer group size, got {group_size!r}: use "
            f"in_features ({weight.shape[-1]}) for one group per row"
        )
    rows, cols = weight.shape
    groups = group_count(weight, group_size)[1]
    if h.shape != (cols, cols):
        raise ValueError(f"Hessian shape {tuple(h.shape)} does not match {cols} input columns")
    if block_size is None:
        block_size = group_size * max(1, 128 // group_size)
    if block_size <= 0 or block_size % group_size:
        raise ValueError(
            f"block size {block_size} must be a multiple of the group size {group_size} "
            "(a group's grid is fit on its columns inside one block)"
        )
    w = require_finite(weight, "the weight to quantize").detach().float().clone()
    w[:, h.diagonal() == 0] = 0  # no calibration input reaches these columns: nothing to keep
    scales, zeros = w.new_zeros(rows, groups), w.new_zeros(rows, groups)
    if act_order:
        order = torch.argsort(h.diagonal(), descending=True)
        scales[:], zeros[:] = fit_grid(w.view(rows, groups, group_size), bits, symmetric=False)
    else:
        order = torch.arange(cols, device=h.device)
    u = inverse_hessian_factor(h[order][:, order], damp)
    w = w[:, order]
    codes = torch.zeros_like(w)

    for start in range(0, cols, block_size):
        end = min(start + block_size, cols)
        block = w[:, start:end].clone()
        errors = torch.zeros_like(block)
        for i in range(end - start):
            col = start + i
            group = order[col] // group_size
            if not act_order and col % group_size == 0:  # a new group: fit on its updated columns
                scales[:, group], zeros[:, group] = fit_grid(block[:, i : i + group_size], bits,
                                                             symmetric=False)
            scale, zero = scales[:, group], zeros[:, group]
            codes[:, col] = to_codes(block[:, i], scale, zero, bits, symmetric=False)
            errors[:, i] = (block[:, i] - (codes[:, col] - zero) * scale) / u[col, col]
            block[:, i:] -= errors[:, i : i + 1] * u[col, col:end]  # feedback inside the block
        w[:, end:] -= errors @ u[start:end, end:]  # feedback to the later blocks, all at once

    codes = codes[:, torch.argsort(order)]  # back to the weight's own column order
    return Quantized(codes.to(torch.uint8), scales, zeros, bits, False, group_size)


def gptq_linear(linear: nn.Linear, inputs: Iterable[torch.Tensor], **options) -> Quantized:
    """GPTQ of an nn.Linear's weight from its calibration inputs (..., in_features); `options`
    as `gptq` takes them (bits, group_size, block_size, damp, act_order)."""
    h = hessian(inputs)
    if h.shape[0] != linear.in_features:
        raise ValueError(
            f"calibration inputs have {h.shape[0]} features, the Linear takes "
            f"{linear.in_features}: record the inputs of this Linear (a forward pre-hook)"
        )
    return gptq(linear.weight, h, **options)
