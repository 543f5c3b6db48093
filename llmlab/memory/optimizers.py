"""The course's optimizers, in one place: the names every package uses (the planner prices them,
the trainer, a DeepSpeed config and the "same as one process?" checks take them), and the one
factory that builds an optimizer from its name."""

import torch

# The vocabulary, with the states each optimizer keeps per parameter: SGD's momentum buffer,
# Adam's two moments (8-bit Adam keeps them too, in one byte each: llmlab.memory.estimate), Muon's
# momentum on the blocks' weight matrices (it leaves the other parameters to AdamW: the estimate
# splits them).
OPTIMIZER_STATES = {"sgd": 0, "sgd-momentum": 1, "adam": 2, "adamw": 2, "adam-8bit": 2, "muon": 1}
# The ones llmlab.train's Trainer runs (its AdamW, bitsandbytes' 8-bit AdamW, Muon with AdamW, and
# SGD with momentum and Adam, for Lab 03's comparison).
TRAINER_OPTIMIZERS = ("adamw", "adam-8bit", "muon", "sgd-momentum", "adam")
# The ones llmlab.distributed.deepspeed_config writes a DeepSpeed optimizer block for.
DEEPSPEED_OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum")
# The optimizer each "same as one process?" check (llmlab.distributed.harness) steps with, on
# the ranks and in the one-process reference alike. SGD with momentum by default, not AdamW:
# AdamW divides each gradient by its running RMS, so a gradient that is pure rounding noise
# becomes a full lr-sized step. GPT-2's key bias is one (softmax ignores a constant added to all
# of a query's scores, so its true gradient is 0): under AdamW its rounding noise, summed in
# another order on 2 ranks, moves it by 2e-5 in 5 steps and the comparison measures noise (1e-3
# relative on that bias), not the strategy. Momentum keeps ZeRO-1 sharding a real optimizer
# state.
REFERENCE_OPTIMIZERS = {
    "sgd-momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    "adamw": (torch.optim.AdamW, {"lr": 1e-3}),
}


def optimizer_by_name(
    parameters, name: str, fused: bool = False, lr: float | None = None, **options
) -> torch.optim.Optimizer:
    """The optimizer called `name` in the course's vocabulary (`OPTIMIZER_STATES`, shared by the
    planner and the trainer): one fused kernel, or else PyTorch's multi-tensor (foreach)
    implementation, its default on CUDA, chosen on the CPU too so both measure the same.

    parameters: tensors or parameter groups; lr defaults to 1e-3 for SGD, 1e-4 for the Adams;
    options: what the optimizer class takes (betas, weight_decay, ...).
    """
    parameters = list(parameters)
    kind = {"fused": True} if fused else {"foreach": True}
    if name in ("sgd", "sgd-momentum"):
        momentum = {"momentum": 0.9} if name == "sgd-momentum" else {}
        lr = 1e-3 if lr is None else lr
        return torch.optim.SGD(parameters, lr=lr, **momentum, **kind, **options)
    if name in ("adam", "adamw"):
        adam = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return adam(parameters, lr=1e-4 if lr is None else lr, **kind, **options)
    if name == "adam-8bit":
        try:
            import bitsandbytes  # optional: only this optimizer needs it
        except ImportError as error:
            raise ImportError(
                "optimizer 'adam-8bit' needs bitsandbytes: `pip install -c constraints.txt "
                "bitsandbytes`, or use 'adamw'"
            ) from error
        # AdamW's states stored in 8 bits with block-wise scales: 2 bytes/param instead of 8.
        return bitsandbytes.optim.AdamW8bit(parameters, lr=1e-4 if lr is None else lr, **options)
    if name == "muon":
        raise ValueError(
            "optimizer 'muon' takes a model, not a list of parameters (Muon gets the blocks' "
            "weight matrices, AdamW the rest): build it with llmlab.train.optim.build_optimizer"
        )
    raise ValueError(f"unknown optimizer {name!r}: use one of {', '.join(OPTIMIZER_STATES)}")
