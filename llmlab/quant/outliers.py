"""Activation outliers and LLM.int8(), by hand (Dettmers, Lewis, Belkada & Zettlemoyer 2022,
"LLM.int8(): 8-bit Matrix Multiplication for Transformers at Scale").

A few input features of a layer carry values far larger than the rest, in every token. An int8
grid fitted to a token's absmax then spends its 255 codes on that one feature and rounds the
others to a handful of levels. LLM.int8() splits the matmul: the feature columns whose values
reach the threshold (6.0 in the paper) go through in float, the rest in int8 with one absmax
scale per token (rows of X) and per output channel (rows of W), "vector-wise" quantization.
"""

from collections.abc import Iterable

import torch
from torch import nn

from llmlab.models.observe import observe_inputs
from llmlab.numerics import relative_error
from llmlab.quant.calibrate import check_batches, find_layers

OUTLIER_THRESHOLD = 6.0  # LLM.int8()'s magnitude for an outlier feature (Sec. 3.2 of the paper)
INT8_MAX = 127


@torch.no_grad()
def feature_absmax(
    model: nn.Module,
    names: Iterable[str],
    batches: Iterable[torch.Tensor],
    window: int | None = None,
) -> dict[str, torch.Tensor]:
    """{name: (in_features,) largest |input| of each feature} of the named Linear / Conv1D
    layers over the calibration batches (token ids (batch, seq)); kept as a running max, so
    long calibration sets cost no memory."""
    layers = find_layers(model, list(names))
    absmax: dict[str, torch.Tensor] = {}

    def update(name: str, x: torch.Tensor) -> None:
        seen = x.abs().amax(0).float()
        absmax[name] = torch.maximum(absmax[name], seen) if name in absmax else seen

    observe_inputs(model, layers, check_batches(batches, window), update, window)
    return absmax


def outlier_features(absmax: torch.Tensor, threshold: float = OUTLIER_THRESHOLD) -> torch.Tensor:
    """Indices of the features whose largest magnitude reaches `threshold`, ascending."""
    return torch.nonzero(absmax >= threshold).flatten()


def int8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 codes, scale per row): each row divided by its own absmax / 127 and rounded."""
    scale = x.abs().amax(-1, keepdim=True) / INT8_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero row: any scale
    return torch.round(x / scale).clamp(-INT8_MAX, INT8_MAX).to(torch.int8), scale


@torch.no_grad()  # numbers to compare, not a graph: weights may be parameters
def int8_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (tokens, in) @ weight (out, in).T with both in vector-wise int8: integer products summed
    exactly (int32 on int8 hardware; float64 here holds every such sum exactly), then scaled by
    the token's and the output channel's scales."""
    x_codes, x_scale = int8_rows(x.float())
    w_codes, w_scale = int8_rows(weight.float())
    products = x_codes.double() @ w_codes.double().T
    return (products * x_scale.double() * w_scale.double().T).float()


@torch.no_grad()
def llm_int8_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    threshold: float = OUTLIER_THRESHOLD,
    outlier_weights: str = "float",
) -> torch.Tensor:
    """LLM.int8()'s decomposition: the input columns with any |value| >= threshold (and the
    matching weight columns) in float, the rest in vector-wise int8, the two results added.

    outlier_weights="float" keeps those weight columns as they were (the paper's fp16 copy);
    "int8" takes them from the int8 weight, as bitsandbytes does: it stores only int8."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(
            f"expected x (tokens, in) and weight (out, in) with the same `in`, got "
            f"{tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if outlier_weights not in ("float", "int8"):
        raise ValueError(f"outlier_weights must be 'float' or 'int8', got {outlier_weights!r}")
    outliers = (x.abs() >= threshold).any(0)
    regular = int8_matmul(x[:, ~outliers], weight[:, ~outliers])
    if outlier_weights == "int8":
        codes, scale = int8_rows(weight.float())
        weight = codes.float() * scale
    return regular + x[:, outliers].float() @ weight[:, outliers].float().T


@torch.no_grad()
def matmul_errors(
    x: torch.Tensor, weight: torch.Tensor, threshold: float = OUTLIER_THRESHOLD
) -> dict[str, float]:
    """Relative error of x @ weight.T against float: plain vector-wise int8 and LLM.int8()."""
    exact = x.double() @ weight.double().T
    return {
        "int8": relative_error(int8_matmul(x, weight), exact),
        "LLM.int8()": relative_error(llm_int8_matmul(x, weight, threshold), exact),
    }
