"""Run a model on calibration batches while watching what some of its layers receive: the
activations Wanda (llmlab.prune) and GPTQ (llmlab.quant) are computed from."""

from collections.abc import Callable, Iterable

import torch
from torch import nn


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
    removed even if a forward fails, so the model is left as it was."""

    def hook_for(name: str):
        def record(module, inputs):
            x = inputs[0].detach()
            on_input(name, x.reshape(-1, x.shape[-1]))

        return record

    hooks = [module.register_forward_pre_hook(hook_for(name)) for name, module in modules.items()]
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        for ids in batches:
            model(ids[:, :window].to(device))
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
