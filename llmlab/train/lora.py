"""LoRA, written out: a frozen layer plus a small trainable low-rank correction beside it.

Fine-tuning changes a weight W (out x in) by some dW. LoRA (Hu et al. 2021) bets that dW has low
rank and trains it as a product B A, with A (rank x in) and B (out x rank):

    y = W x + (alpha / rank) * B A x

- W (and its bias) is frozen: no gradients, no optimizer state. Only A and B train, which for
  rank 8 on a 768 x 768 layer is 2 * 8 * 768 numbers instead of 768 * 768 (2%).
- A starts random (Kaiming-uniform, like nn.Linear's own weights) and B starts at zero, so the
  product is zero and the model starts exactly as the pretrained one; B's gradient is not zero
  (it sees A x), so training moves it at once.
- alpha / rank scales the correction, so changing the rank does not change how big a step of
  the optimizer is in the output; alpha is usually 2 x rank.
- `merge()` adds (alpha / rank) B A into W: the model is then as fast as the original (one
  matmul per layer) and ships as an ordinary checkpoint. `unmerge()` takes it out again.

On a 16-bit base the adapters are kept (and trained) in float32, as peft does by default; the
merge rounds their product into the base once.

GPT-2's projections are `transformers`' Conv1D, which store the weight as (in, out) and compute
x W; the update is then added transposed. The layers are built in peft's order, so the same seed
gives the same A as `peft.LoraConfig` (the tests check outputs, training and merged weights).
"""

import math

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D


class LoRALinear(nn.Module):
    """`base(x) + (alpha / rank) * B(A(dropout(x)))` around a frozen nn.Linear or Conv1D."""

    def __init__(self, base: nn.Module, rank: int = 8, alpha: float = 16, dropout: float = 0.0):
        super().__init__()
        if not isinstance(base, nn.Linear | Conv1D):
            raise TypeError(f"LoRALinear wraps nn.Linear or GPT-2's Conv1D, not {type(base)}")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank must be a positive integer (8 or 16 are usual), got {rank!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.base = base
        self.transposed = isinstance(base, Conv1D)  # Conv1D keeps its weight as (in, out)
        if self.transposed:
            in_features, out_features = base.weight.shape
        else:
            out_features, in_features = base.weight.shape
        base.requires_grad_(False)
        self.rank, self.alpha, self.scaling = rank, alpha, alpha / rank
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        # Built as nn.Linear layers and then re-initialized, in this order, as peft does: the
        # same random numbers are drawn, so a seed gives the same adapter in both.
        self.lora_A = nn.Linear(in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.lora_A.to(base.weight.device, base.weight.dtype)
        self.lora_B.to(base.weight.device, base.weight.dtype)
        if base.weight.dtype in (torch.float16, torch.bfloat16):
            # Trained in float32 (as peft's default): Adam's small updates to A and B would round
            # away in 16 bits. (Rounded to the base's dtype first, as peft, so a seed agrees.)
            self.lora_A.float()
            self.lora_B.float()
        self.merged = False

    def delta_weight(self) -> torch.Tensor:
        """(alpha / rank) B A, in the base weight's layout."""
        delta = self.lora_B.weight @ self.lora_A.weight * self.scaling
        return delta.t() if self.transposed else delta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base(x)
        if self.merged:  # the correction is inside the base weight already
            return result
        update = self.lora_B(self.lora_A(self.dropout(x.to(self.lora_A.weight.dtype))))
        return (result + update * self.scaling).to(result.dtype)

    @torch.no_grad()
    def merge(self) -> None:
        """Add the correction into the base weight: one matmul per forward, as before LoRA."""
        if self.merged:
            raise RuntimeError("this LoRA layer is merged already: unmerge() it first")
        self.base.weight += self.delta_weight()  # float32 update, rounded once into the base
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Take the correction back out (to train the adapter on, or swap it for another)."""
        if not self.merged:
            raise RuntimeError("this LoRA layer is not merged: there is nothing to unmerge")
        self.base.weight -= self.delta_weight()
        self.merged = False


def add_lora(
    model: nn.Module, targets: list[str], rank: int = 8, alpha: float = 16, dropout: float = 0.0
) -> dict[str, LoRALinear]:
    """Freeze every weight of `model` and replace each layer named in `targets` (full module
    names, e.g. "transformer.h.0.attn.c_attn") by a LoRALinear around it, in place; returns them.
    The layers are wrapped in the model's module order, as peft does (the same seed, the same A)."""
    model.requires_grad_(False)
    modules = dict(model.named_modules())
    missing = [name for name in targets if name not in modules]
    if missing:
        raise ValueError(f"no modules named {missing} in this {type(model).__name__}")
    wrapped = {}
    for name in [name for name in modules if name in set(targets)]:
        parent_name, _, child = name.rpartition(".")
        wrapped[name] = LoRALinear(modules[name], rank, alpha, dropout)
        setattr(model.get_submodule(parent_name), child, wrapped[name])
    return wrapped


def merge_lora(model: nn.Module) -> None:
    """Merge every LoRA layer of `model` into its base weight."""
    for module in model.modules():
        if isinstance(module, LoRALinear):
            module.merge()
