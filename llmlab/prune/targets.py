"""Which weight matrices pruning touches, and along which dimension each one reads its input.

By default the matrices of the transformer blocks (attention and MLP projections): nearly all
the compute, and what the pruning literature prunes (Wanda, SparseGPT leave the embeddings and
the LM head dense, as they are few and sensitive).
"""

from torch import nn
from transformers.pytorch_utils import Conv1D

from llmlab.models import transformer_blocks

PRUNABLE = (nn.Linear, Conv1D)  # GPT-2's projections are Conv1D: a Linear with weight (in, out)


def named_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """[("transformer.h.0", block), ...]: each transformer block with its module name."""
    blocks = transformer_blocks(model)
    prefix = next(name for name, module in model.named_modules() if module is blocks)
    return [(f"{prefix}.{index}", block) for index, block in enumerate(blocks)]


def prunable_weights(model: nn.Module, include_embeddings: bool = False) -> dict[str, nn.Module]:
    """{parameter name: module} for every pruned matrix, in model order ("...c_fc.weight").

    include_embeddings adds the token embedding and an untied LM head. A tied model refuses it:
    there the LM head *is* the token embedding, so pruning one would prune both.
    """
    weights = {
        f"{name}.weight": module
        for block_name, block in named_blocks(model)
        for name, module in block.named_modules(prefix=block_name)
        if isinstance(module, PRUNABLE)
    }
    if include_embeddings:
        weights.update(_embedding_weights(model))
    return weights


def _embedding_weights(model: nn.Module) -> dict[str, nn.Module]:
    names = {module: name for name, module in model.named_modules()}
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    if head is not None and head.weight is embedding.weight:
        rows, width = embedding.weight.shape
        raise ValueError(
            f"this model ties its LM head to the token embedding ({names[embedding]}.weight, one "
            f"{rows} x {width} matrix): pruning it would zero the same entries in the input "
            "embedding and in the output layer at once. Prune the blocks only "
            "(include_embeddings=False), or untie the head first (tie_word_embeddings=False and "
            "a copy of the matrix) to prune the two separately."
        )
    found = {f"{names[embedding]}.weight": embedding}
    if head is not None:
        found[f"{names[head]}.weight"] = head
    return found


def input_dim(module: nn.Module) -> int:
    """The weight dimension that meets the input features: N:M groups run along it."""
    if isinstance(module, Conv1D):
        return 0  # weight is (in, out): y = x @ W
    if isinstance(module, nn.Linear):
        return 1  # weight is (out, in): y = x @ W.T
    raise TypeError(f"N:M sparsity is for Linear and Conv1D layers, not {type(module).__name__}")
