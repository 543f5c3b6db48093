"""Quantize a whole model, block by block: every Linear / Conv1D of the transformer blocks gets
int codes (RTN, or GPTQ from its calibration inputs) and its weight is replaced by the dequantized
one, a fake-quantized model that computes what the quantized one would (for perplexity).

GPTQ goes sequentially, as the paper does: block i is calibrated on the activations of the model
whose blocks before i are already quantized, so each block compensates for the errors upstream.
The embeddings, norms and LM head stay in their float format, as GPTQ checkpoints keep them.
"""

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers.pytorch_utils import Conv1D

from llmlab.models import BLOCK_MATRIX_TYPES, named_blocks
from llmlab.models.finite import require_finite_parameters
from llmlab.quant.calibrate import check_batches, record_inputs
from llmlab.quant.formats import Quantized, check_bits
from llmlab.quant.gptq import gptq, hessian
from llmlab.quant.rtn import rtn
from llmlab.quant.size import quantized_bits

METHODS = ("rtn", "gptq")
FLOAT_BITS = 16  # the unquantized parameters ship in fp16/bf16, as GPTQ checkpoints store them


@dataclass
class ModelQuantization:
    """What `quantize_model` did: each layer's codes and the sizes they cost."""

    layers: dict[str, Quantized]  # by module name, weights as (out, in) even for Conv1D
    quantized_bits: int  # codes + scales + zeros of the quantized layers
    quantized_weights: int
    float_bits: int  # the parameters left in float (embeddings, norms, biases, head)
    float_params: int

    @property
    def layer_bits_per_weight(self) -> float:
        """Bits per weight over the quantized matrices, scales and zero points included."""
        return self.quantized_bits / self.quantized_weights

    @property
    def model_bits_per_weight(self) -> float:
        """Bits per parameter over the whole model, the float ones included."""
        total_bits = self.quantized_bits + self.float_bits
        return total_bits / (self.quantized_weights + self.float_params)


def matrix(module: nn.Module) -> torch.Tensor:
    """The layer's weight as (out, in): Conv1D (GPT-2) stores it transposed, (in, out)."""
    return module.weight.T if isinstance(module, Conv1D) else module.weight


@torch.no_grad()
def write_back(module: nn.Module, q: Quantized) -> None:
    """Replace the layer's weight by the dequantized codes, in its own layout and dtype."""
    weight = q.dequantize().to(module.weight.dtype)
    module.weight.copy_(weight.T if isinstance(module, Conv1D) else weight)


def quantize_model(
    model: nn.Module,
    method: str = "gptq",
    batches: Iterable[torch.Tensor] | None = None,
    bits: int = 4,
    group_size: int | str = 128,
    window: int | None = None,
    progress: bool = True,
    **gptq_options,
) -> ModelQuantization:
    """Quantize every Linear / Conv1D of the model's blocks in place (fake-quant) with "rtn" or
    "gptq", group-wise asymmetric int-`bits` (group_size "channel": one grid per output row of
    each matrix, whatever its width). GPTQ needs `batches` of token ids (batch, seq),
    cut to `window` tokens; `gptq_options` go to `gptq` (block_size, damp, act_order). With
    `progress`, a bar counts the blocks done."""
    if method not in METHODS:
        raise ValueError(f"unknown quantization method {method!r}: use one of {METHODS}")
    check_bits(bits)
    if method == "gptq":
        batches = check_batches(batches if batches is not None else [], window)
    elif gptq_options:
        raise TypeError(f"RTN takes no GPTQ options, got {sorted(gptq_options)}")
    require_finite_parameters(model)
    layers = {}
    blocks = named_blocks(model)
    for block_name, block in tqdm(blocks, desc=f"{method} blocks", disable=not progress):
        here = {name: module for name, module in block.named_modules(prefix=block_name)
                if isinstance(module, BLOCK_MATRIX_TYPES)}
        if method == "gptq":  # this block's inputs, through the already quantized blocks
            inputs = record_inputs(model, here, batches, window)
        for name, module in here.items():
            weight = matrix(module)
            size = weight.shape[1] if group_size == "channel" else group_size  # in: one per row
            if method == "rtn":
                q = rtn(weight, bits, size)
            else:
                q = gptq(weight, hessian(inputs[name]), bits, size, **gptq_options)
            write_back(module, q)
            layers[name] = q
    return size_report(model, layers)


def size_report(model: nn.Module, layers: dict[str, Quantized]) -> ModelQuantization:
    """The sizes of a model whose modules named in `layers` hold those codes; every other
    parameter counts as float."""
    quantized = {id(module.weight) for name, module in model.named_modules() if name in layers}
    floats = [p for p in model.parameters() if id(p) not in quantized]
    float_params = sum(p.numel() for p in floats)  # model.parameters(): a tied head counts once
    return ModelQuantization(
        layers,
        sum(quantized_bits(q) for q in layers.values()),
        sum(q.codes.numel() for q in layers.values()),
        float_params * FLOAT_BITS,
        float_params,
    )
