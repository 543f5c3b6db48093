"""Which weight matrices pruning touches.

By default the matrices of the transformer blocks (attention and MLP projections): nearly all
the compute, and what the pruning literature prunes (Wanda, SparseGPT leave the embeddings and
the LM head dense, as they are few and sensitive).
"""

from torch import nn

from llmlab.models import block_matrices


def prunable_weights(model: nn.Module, include_embeddings: bool = False) -> dict[str, nn.Module]:
    """{parameter name: module} for every pruned matrix, in model order ("...c_fc.weight"): the
    blocks' matrices (llmlab.models.block_matrices).

    include_embeddings adds the token embedding and an untied LM head. A tied model refuses it:
    there the LM head *is* the token embedding, so pruning one would prune both.
    """
    weights = block_matrices(model)
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
