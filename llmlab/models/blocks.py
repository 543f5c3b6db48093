"""The repeated transformer blocks of a model `build_model` makes: the unit that parallel
strategies shard (FSDP wraps each block), split (pipeline stages) or plan (tensor parallel); and
the weight matrices inside them, which pruning, quantization and LoRA work on.

GPT-2's projections are `transformers`' Conv1D: a linear layer whose weight is stored (in, out),
where nn.Linear stores (out, in). `input_dim` and `linear_from_conv1d` are the one place that
knows it.
"""

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

BLOCK_MATRIX_TYPES = (nn.Linear, Conv1D)  # the layers whose weight is a block's matrix


def transformer_blocks(model: nn.Module) -> nn.ModuleList:
    """The list of decoder blocks: `model.transformer.h` (GPT-2) or `model.model.layers` (Llama).

    Also accepts a model already wrapped by DDP (`.module`), so callers need not unwrap it.
    """
    inner = getattr(model, "module", model)  # DistributedDataParallel keeps the model here
    for path in ("transformer.h", "model.layers"):
        blocks = _get_path(inner, path)
        if isinstance(blocks, nn.ModuleList):
            return blocks
    raise TypeError(
        f"cannot find the transformer blocks of a {type(inner).__name__}: expected a GPT-2 "
        "(model.transformer.h) or Llama (model.model.layers) model from llmlab.models.build_model"
    )


def _get_path(module: nn.Module, path: str):
    for name in path.split("."):
        module = getattr(module, name, None)
        if module is None:
            return None
    return module


def named_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """[("transformer.h.0", block), ...]: each transformer block with its module name."""
    blocks = transformer_blocks(model)
    prefix = next(name for name, module in model.named_modules() if module is blocks)
    return [(f"{prefix}.{index}", block) for index, block in enumerate(blocks)]


def block_matrices(model: nn.Module) -> dict[str, nn.Module]:
    """{parameter name: layer} for the weight matrix of every Linear / Conv1D inside the blocks
    (attention and MLP projections), in model order: "transformer.h.0.attn.c_attn.weight", ...

    Nearly all of the compute; what pruning and quantization change and LoRA adapts (the
    embeddings and the LM head are few, sensitive, and usually left alone).
    """
    return {
        f"{name}.weight": module
        for block_name, block in named_blocks(model)
        for name, module in block.named_modules(prefix=block_name)
        if isinstance(module, BLOCK_MATRIX_TYPES)
    }


def matrices_and_others(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """The trainable weight matrices of the blocks (`block_matrices`), and every other trainable
    parameter (embeddings, LM head, norms, biases): the split Muon trains by (Muon on the first,
    another optimizer on the second)."""
    matrices = [layer.weight for layer in block_matrices(model).values()
                if layer.weight.requires_grad]
    on_matrices = {id(p) for p in matrices}
    others = [p for p in model.parameters() if p.requires_grad and id(p) not in on_matrices]
    return matrices, others


def input_dim(module: nn.Module) -> int:
    """The weight dimension that meets the input features."""
    if isinstance(module, Conv1D):
        return 0  # weight is (in, out): y = x @ W
    if isinstance(module, nn.Linear):
        return 1  # weight is (out, in): y = x @ W.T
    raise TypeError(f"expected a Linear or GPT-2 Conv1D layer, not {type(module).__name__}")


def linear_from_conv1d(conv: Conv1D, rows: slice = slice(None)) -> nn.Linear:
    """An nn.Linear computing what this Conv1D computes (only the output features `rows`, if
    given): the same numbers, the weight transposed. For tools that know only nn.Linear (torch's
    tensor-parallel styles, torchao)."""
    weight = conv.weight.detach().t()[rows]
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=conv.bias is not None,
                       device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if conv.bias is not None:
            linear.bias.copy_(conv.bias.detach()[rows])
    return linear
