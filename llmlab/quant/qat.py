"""Quantization-aware training (QAT): fine-tune a model while every Linear / Conv1D of its blocks
computes with its weight fake-quantized (group-wise asymmetric int-k, as RTN and GPTQ store it),
so training learns weights that survive rounding instead of weights that merely fit in float.

Rounding has a zero gradient almost everywhere, so training could not move the weights through
it; the straight-through estimator (STE, Bengio et al. 2013) passes the gradient of the
fake-quantized weight back to the float weight unchanged, as if rounding were the identity.
The float weights stay the trained parameters; `finish_qat` rounds them once more, for good.

The fake quantization is a parametrization (torch.nn.utils.parametrize), so the model keeps its
own classes (a transformers model still trains through llmlab.train and generates) and the
wrapping comes off cleanly: call `finish_qat` before saving or measuring sizes. GPT-2's Conv1D
stores its weight (in, out): it is quantized as (out, in), with groups along the input
features, exactly as quantize_model does.
"""

import numbers

import torch
from torch import nn
from torch.nn.utils import parametrize
from transformers.pytorch_utils import Conv1D

from llmlab.models import block_matrices
from llmlab.quant.formats import check_bits, fake_quantize
from llmlab.quant.model import ModelQuantization, matrix, size_report, write_back
from llmlab.quant.rtn import rtn


class StraightThrough(torch.autograd.Function):
    """Forward: the fake-quantized (out, in) weight. Backward: the incoming gradient as it is."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
        return fake_quantize(weight, bits, symmetric=False, granularity=group_size)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None, None  # no gradient for bits and group_size


class FakeQuantized(nn.Module):
    """The parametrization: a layer's weight, in its own layout, seen through int-`bits`
    group-wise fake quantization with a straight-through gradient."""

    def __init__(self, bits: int, group_size: int, transposed: bool):
        super().__init__()
        self.bits, self.group_size, self.transposed = bits, group_size, transposed

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        if self.transposed:  # Conv1D: (in, out) -> (out, in) and back
            return StraightThrough.apply(weight.T, self.bits, self.group_size).T
        return StraightThrough.apply(weight, self.bits, self.group_size)


def prepare_qat(model: nn.Module, bits: int = 4, group_size: int = 128) -> list[str]:
    """Make every Linear / Conv1D of the model's blocks compute with its weight fake-quantized
    (asymmetric int-`bits`, one scale and zero point per `group_size` input columns) and train
    through it with the STE. The model is changed in place; returns the names of the layers."""
    check_bits(bits)
    if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral):
        raise TypeError(f"group_size must be a positive integer, got {group_size!r}")
    # The same layers quantize_model quantizes: every block matrix, embeddings and head left out.
    layers = {name.removesuffix(".weight"): module
              for name, module in block_matrices(model).items()}
    for name, module in layers.items():  # check them all before changing any
        if parametrize.is_parametrized(module, "weight"):
            raise ValueError(
                f"{name}.weight is already parametrized (fake-quantized by an earlier "
                "prepare_qat?): call finish_qat first, or remove its parametrization"
            )
        if hasattr(module, "weight_mask"):  # torch.nn.utils.prune's form, as llmlab.prune keeps it
            raise ValueError(
                f"{name}.weight carries a pruning mask: make it permanent first "
                "(llmlab.prune.make_permanent), then prepare the pruned model for QAT"
            )
        inputs = matrix(module).shape[1]
        if group_size <= 0 or inputs % group_size:
            raise ValueError(
                f"group size {group_size} does not divide {name}'s {inputs} input features: "
                "pick a divisor of every layer's input size (e.g. 32, 64 or 128)"
            )
    for module in layers.values():
        fake = FakeQuantized(bits, group_size, transposed=isinstance(module, Conv1D))
        parametrize.register_parametrization(module, "weight", fake)
    return list(layers)


def qat_layers(model: nn.Module) -> dict[str, nn.Module]:
    """{module name: module} for every layer prepare_qat fake-quantizes."""
    return {name: module for name, module in model.named_modules()
            if parametrize.is_parametrized(module, "weight")
            and isinstance(module.parametrizations.weight[0], FakeQuantized)}


@torch.no_grad()
def finish_qat(model: nn.Module) -> ModelQuantization:
    """Remove the fake quantization and round each trained float weight onto its int grid for
    good (the same codes the forward used): the model then computes exactly as in training, with
    plain weights, and the report holds each layer's codes and the model's bits per weight."""
    layers = qat_layers(model)
    if not layers:
        raise ValueError("this model has no fake-quantized layers: call prepare_qat first")
    codes = {}
    for name, module in layers.items():
        fake = module.parametrizations.weight[0]
        # leave_parametrized=False gives back the float weight that training updated.
        parametrize.remove_parametrizations(module, "weight", leave_parametrized=False)
        codes[name] = rtn(matrix(module), fake.bits, fake.group_size)
        write_back(module, codes[name])
    return size_report(model, codes)
