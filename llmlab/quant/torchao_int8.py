"""torchao's int8 for a whole model on CPU: weight-only (int8 weights, float activations) or
dynamic (activations quantized to int8 per token at run time, int8 x int8 matmuls).

torchao's `quantize_` swaps the weight of every nn.Linear it is given for an int8 tensor
subclass. GPT-2's projections are Conv1D (an nn.Linear with its weight stored (in, out)), which
`quantize_` passes over, so the copy's Conv1D layers become equal nn.Linear layers first.
Only the transformer blocks are quantized: the embeddings and the tied LM head stay in float,
as in the other variants of the lab.
"""

import copy

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from llmlab.device import device_or_cpu
from llmlab.models import linear_from_conv1d, named_blocks

KINDS = ("weight-only", "dynamic")


def replace_conv1d(module: nn.Module) -> None:
    """Swap every Conv1D inside `module` for its equal nn.Linear, in place."""
    for name, child in module.named_children():
        if isinstance(child, Conv1D):
            setattr(module, name, linear_from_conv1d(child))
        else:
            replace_conv1d(child)


def int8_model(
    model: nn.Module, kind: str = "weight-only", device: str | torch.device | None = None
) -> nn.Module:
    """A copy of the model whose block matrices are torchao int8 (symmetric, one scale per
    output row): kind "weight-only" (Int8WeightOnlyConfig) or "dynamic"
    (Int8DynamicActivationInt8WeightConfig). The original model is left as it was."""
    from torchao.quantization import (
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
        quantize_,
    )

    configs = {
        "weight-only": Int8WeightOnlyConfig,
        "dynamic": Int8DynamicActivationInt8WeightConfig,
    }
    if kind not in configs:
        raise ValueError(f"unknown int8 kind {kind!r}: use one of {', '.join(KINDS)}")
    quantized = copy.deepcopy(model).to(device_or_cpu(device, "torchao")).eval()
    for _, block in named_blocks(quantized):
        replace_conv1d(block)
        quantize_(block, configs[kind]())
    return quantized


def int8_bits_per_weight(model: nn.Module) -> float:
    """Bits per weight of the model's torchao-quantized matrices, read from the tensors each one
    is made of: the int8 codes, a float32 scale and an int8 zero point per row (all zero for
    a symmetric grid, but stored): 8 + 40 / in_features."""
    from torchao.utils import TorchAOBaseTensor

    bits = weights = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(weight, TorchAOBaseTensor):
            parts = [getattr(weight, name) for name in weight.__tensor_flatten__()[0]]
            bits += sum(part.numel() * part.element_size() * 8 for part in parts)
            weights += weight.shape.numel()
    if not weights:
        raise ValueError("this model has no torchao-quantized weights: make it with int8_model")
    return bits / weights
