"""FP8 training, emulated on the CPU: every matrix of the model's blocks multiplies fp8 operands.
Forward, the input and the weight go through e4m3 (more precision); backward, the output
gradient goes through e5m2 (more range: gradients span more orders of magnitude) for both the
input's and the weight's gradient. Each operand is rounded to fp8 and back, then multiplied in
float32: the numbers an fp8 tensor core would multiply, without one.

A tensor goes through a scale before its cast, by one of three recipes:
- "none": no scale. Values below the format's smallest subnormal flush to 0; values past its
  max become inf in e5m2, and in e4m3fn (no infinity) saturate to +-448 (torch 2.12 on; NaN
  before).
- "dynamic": this tensor's amax lands on the format's max (per tensor), cast with saturation.
- "delayed": the scale comes from the largest amax of the last `history_length` steps, as
  Transformer Engine's and torchao's delayed scaling do (no pass over the tensor before its
  cast); this tensor's amax joins the history after use, and what it holds beyond the history's
  amax saturates.
Each cast counts what it lost (`FP8Counts`), so a run that degrades can be explained.

The embeddings and the LM head stay in float32: a token's row and the logits' softmax are where
fp8's 2-3 mantissa bits cost the most, and they are a small part of the compute (as in
torchao's and Transformer Engine's recipes).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from llmlab.models import block_matrices
from llmlab.quant.fp8 import fp8_dtype, fp8_scale, saturated_cast

RECIPES = ("none", "dynamic", "delayed")
ROLES = {"input": "e4m3", "weight": "e4m3", "grad": "e5m2"}  # tensor role -> its fp8 format
HISTORY_LENGTH = 16  # torchao's default; Transformer Engine's is 1024


def delayed_scale_cast(
    x: torch.Tensor, amax_history: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Delayed scaling: (x / scale in `dtype`, saturated; scale; the history with x's amax
    in front and its oldest entry dropped). The scale puts the history's largest amax on the
    format's max; x itself is looked at only after, to be recorded."""
    scale = fp8_scale(amax_history.max(), dtype)
    x_fp8 = saturated_cast(x, scale, dtype)  # x may exceed the history: saturate, not overflow
    amax = x.detach().abs().amax().float().reshape(1)
    return x_fp8, scale, torch.cat([amax, amax_history[:-1]])


def overflow_threshold(dtype: torch.dtype) -> float:
    """Half a step above the format's max: what lies past it rounds beyond max (overflows); what
    lies between rounds to max, as any value rounds to its nearest (e4m3fn: 464, e5m2: 61440)."""
    info = torch.finfo(dtype)
    return info.max + info.eps * 2.0 ** math.floor(math.log2(info.max)) / 2


@dataclass
class FP8Counts:
    """What fp8 casts lost: of `values` cast, how many non-zero values became 0 (underflow),
    how many lay beyond the format's max after scaling (overflow: saturated, or inf where
    nothing clamps them) and how many came out inf or NaN."""

    values: int = 0
    underflow: int = 0
    overflow: int = 0
    inf_or_nan: int = 0

    def add(self, scaled: torch.Tensor, x_fp8: torch.Tensor) -> None:
        """Count one cast of `scaled` (x / scale) to `x_fp8`."""
        back = x_fp8.float()
        self.values += scaled.numel()
        self.underflow += int(((scaled != 0) & (back == 0)).sum())
        self.overflow += int((scaled.abs() > overflow_threshold(x_fp8.dtype)).sum())
        self.inf_or_nan += int((~back.isfinite()).sum())


class FP8Cast:
    """One tensor role of one layer (its input, weight or output gradient) through fp8 and back,
    by its recipe; keeps delayed scaling's amax history and the counts of what was lost."""

    def __init__(self, recipe: str, role: str, history_length: int = HISTORY_LENGTH):
        if recipe not in RECIPES:
            raise ValueError(f"unknown fp8 scaling recipe {recipe!r}: use one of {RECIPES}")
        self.recipe, self.dtype = recipe, fp8_dtype(ROLES[role])
        self.history = torch.zeros(history_length)
        self.counts = FP8Counts()

    @torch.no_grad()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if self.recipe == "none":
            scale = torch.ones(())
            x_fp8 = x.to(self.dtype)  # the bare cast: no clamp, so overflow shows as it would
        elif self.recipe == "dynamic":
            scale = fp8_scale(x.abs().amax(), self.dtype)
            x_fp8 = saturated_cast(x, scale, self.dtype)
        else:
            if not self.history.any():  # a first step has no history: start it from this tensor
                self.history.fill_(x.abs().amax())
            x_fp8, scale, self.history = delayed_scale_cast(x, self.history, self.dtype)
        self.counts.add(x / scale, x_fp8)
        return x_fp8.float() * scale


class FP8Matmul(torch.autograd.Function):
    """x @ weight.T (weight (out, in)) with fp8 operands. Forward: x and weight through their
    e4m3 casts. Backward: the output gradient through its e5m2 cast, multiplied by the forward's
    fp8 weight (the input's gradient) and fp8 input (the weight's gradient), as an fp8 GEMM
    reuses them. Every product and sum in float32."""

    @staticmethod
    def forward(ctx, x, weight, casts: dict[str, FP8Cast]):
        x8, weight8 = casts["input"](x), casts["weight"](weight)
        ctx.save_for_backward(x8, weight8)
        ctx.casts, ctx.dtypes = casts, (x.dtype, weight.dtype)
        return (x8 @ weight8.T).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x8, weight8 = ctx.saved_tensors
        grad8 = ctx.casts["grad"](grad)
        grad_x = grad8 @ weight8
        grad_weight = grad8.flatten(0, -2).T @ x8.flatten(0, -2)  # summed over batch and tokens
        return grad_x.to(ctx.dtypes[0]), grad_weight.to(ctx.dtypes[1]), None


class FP8Linear(nn.Module):
    """An nn.Linear or GPT-2 Conv1D computing through FP8Matmul; the layer's own weight and bias
    (the same parameters, under the same names), the bias added in float32."""

    def __init__(self, layer: nn.Module, recipe: str, history_length: int = HISTORY_LENGTH):
        super().__init__()
        self.weight, self.bias = layer.weight, layer.bias
        self.transposed = isinstance(layer, Conv1D)  # Conv1D stores its weight (in, out)
        self.recipe = recipe
        self.casts = {role: FP8Cast(recipe, role, history_length) for role in ROLES}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.T if self.transposed else self.weight
        out = FP8Matmul.apply(x, weight, self.casts)
        return out if self.bias is None else out + self.bias


def fp8_training(
    model: nn.Module, recipe: str = "dynamic", history_length: int = HISTORY_LENGTH
) -> list[str]:
    """Swap every Linear / Conv1D of the model's blocks for an FP8Linear with `recipe`, in place
    (the embeddings and the head stay float32); returns the swapped layers' names. The
    parameters stay the same tensors, so an optimizer made before the swap still trains them."""
    names = [name.removesuffix(".weight") for name in block_matrices(model)]
    if not names:
        raise ValueError("no Linear or Conv1D layers in this model's blocks (swapped already?)")
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, FP8Linear(getattr(parent, child), recipe, history_length))
    return names


def fp8_counts(model: nn.Module) -> list[dict]:
    """One row per recipe and tensor role: the model's FP8Linear casts' counts, summed."""
    totals: dict[tuple[str, str], FP8Counts] = {}
    for module in model.modules():
        if isinstance(module, FP8Linear):
            for role, cast in module.casts.items():
                total = totals.setdefault((module.recipe, role), FP8Counts())
                for field, count in vars(cast.counts).items():
                    setattr(total, field, getattr(total, field) + count)
    return [{"recipe": recipe, "role": role, "format": ROLES[role], **vars(counts)}
            for (recipe, role), counts in totals.items()]
