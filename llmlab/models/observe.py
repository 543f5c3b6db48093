"""Run a model on calibration batches while watching what some of its layers receive: the
activations Wanda (llmlab.prune) and GPTQ (llmlab.quant) are computed from."""

from collections.abc import Callable, Iterable

import torch
from torch import nn

from llmlab.models.eval_mode import eval_mode
from llmlab.models.finite import require_finite


@torch.no_grad()
def observe_inputs(
    model: nn.Module,
    modules: dict[str, nn.Module],
    batches: Iterable[torch.Tensor],
    on_input: Callable[[str, torch.Tensor], None],
    window: int | None = None,
) -> None:
    """Run `model` on each batch of token ids (batch, seq), cut to its first `window` tokens if
    given, and call `on_input(name, x)` with each named module's input as (tokens, features).
    The model runs in eval mode (no dropout); its training mode comes back and the hooks are
    removed even if a forward fails, so the model is left as it was. Token ids outside the
    vocabulary and NaN or inf inputs are refused with the batch and layer they are in."""
    vocab = model.get_input_embeddings().num_embeddings

    def hook_for(name: str):
        def record(module, inputs):
            x = inputs[0].detach()
            # `batch` is the loop variable below: the batch the model is running on
            require_finite(x, f"the input of {name} on calibration batch {batch}")
            on_input(name, x.reshape(-1, x.shape[-1]))

        return record

    hooks = [module.register_forward_pre_hook(hook_for(name)) for name, module in modules.items()]
    try:
        device = next(model.parameters()).device
        with eval_mode(model):
            for batch, ids in enumerate(batches):
                check_token_ids(ids, vocab, batch)
                model(ids[:, :window].to(device))
    finally:
        for hook in hooks:
            hook.remove()


def check_token_ids(ids: torch.Tensor, vocab: int, batch: int) -> None:
    """Integer ids from 0 to vocab - 1, or a ValueError that says which batch is not."""
    if ids.is_floating_point() or ids.is_complex():
        raise ValueError(f"calibration batch {batch} holds {ids.dtype} values: token ids are "
                         "integers (a tokenizer's output, or a token shard's windows)")
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab):
        wrong = ids.max() if ids.max() >= vocab else ids.min()
        raise ValueError(
            f"calibration batch {batch} holds token id {int(wrong)}, outside this model's "
            f"vocabulary of {vocab} (ids 0 to {vocab - 1}): were the batches made with another "
            "tokenizer? Take them from the corpus this model was trained on"
        )
