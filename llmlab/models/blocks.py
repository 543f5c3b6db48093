"""The repeated transformer blocks of a model `build_model` makes: the unit that parallel
strategies shard (FSDP wraps each block), split (pipeline stages) or plan (tensor parallel)."""

from torch import nn


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
