"""Load a checkpoint's weights and optimizer states into another number of processes.

A sharded checkpoint (FSDP: `dcp/`, one file per rank that wrote it) is read by
torch.distributed.checkpoint into whatever sharding the model has now: M FSDP ranks, or a plain
model in one process. An unsharded checkpoint (model.safetensors and state.pt, from one process or
DDP) holds full tensors; FSDP ranks each keep their shard of them (set_*_state_dict with
full_state_dict=True). Both go through the same signature check as a resume, so a checkpoint of
another model shape is refused before anything is loaded.

What does not move: each rank's data position and RNG state (Trainer.resume refuses another
process count for that reason). A resharded run continues the same weights and AdamW moments,
not the same batches or dropout masks.
"""

import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from llmlab.train.checkpoint import (
    SHARDED_DIR,
    CheckpointMismatch,
    check_belongs_to,
    is_sharded,
    load_state,
)

FULL = StateDictOptions(full_state_dict=True)  # every tensor whole; FSDP ranks keep their shard


def load_resharded(
    checkpoint: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> int:
    """Load `checkpoint`'s weights (and AdamW states, with `optimizer`) into `model`, however many
    processes wrote it and however many load it; return its step.

    Call it on every rank of an FSDP model (the loading is collective), or in one process with a
    plain model. The optimizer must be built like the saving run's (llmlab.train.optim)."""
    checkpoint = Path(checkpoint)
    meta = check_belongs_to(checkpoint, model)
    if is_sharded(checkpoint):
        _load_sharded(checkpoint / SHARDED_DIR, model, optimizer)
    else:
        _load_full(checkpoint, model, optimizer)
    return meta["step"]


def _load_sharded(folder: Path, model, optimizer) -> None:
    # DCP fills the tensors of the state dict it is given, in their current sharding, from the
    # saved shards whatever their layout: this is where N ranks' files become M ranks' shards.
    state = {"model": get_model_state_dict(model)}
    if optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(model, optimizer)
    with warnings.catch_warnings():
        # Without a process group DCP loads in one process, as meant here, and warns it does so.
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load(state, checkpoint_id=folder)
    set_model_state_dict(model, state["model"])
    if optimizer is not None:
        set_optimizer_state_dict(model, optimizer, state["optimizer"])


def _load_full(checkpoint: Path, model, optimizer) -> None:
    weights = _with_tied_names(load_file(checkpoint / "model.safetensors"), model)
    set_model_state_dict(model, weights, options=FULL)
    if optimizer is not None:
        saved = load_state(checkpoint)["optimizer"]
        set_optimizer_state_dict(model, optimizer, _by_name(saved, model, optimizer), options=FULL)


def _with_tied_names(weights: dict, model) -> dict:
    """safetensors stores a tied tensor once (GPT-2's lm_head is its token embedding): give it
    back under every name the model's state dict has for it."""
    names_by_tensor: dict[int, list[str]] = {}
    for name, tensor in model.state_dict().items():
        names_by_tensor.setdefault(id(tensor), []).append(name)
    for names in names_by_tensor.values():
        stored = next((weights[n] for n in names if n in weights), None)
        weights.update({n: stored for n in names if stored is not None})
    return weights


def _by_name(saved: dict, model, optimizer) -> dict:
    """A one-process optimizer state dict (parameters numbered in param_groups order) keyed by
    parameter name instead, the form set_optimizer_state_dict takes for any sharding."""
    names = {id(p): n for n, p in model.named_parameters()}
    sizes = [len(g["params"]) for g in saved["param_groups"]]
    if sizes != [len(g["params"]) for g in optimizer.param_groups]:
        raise CheckpointMismatch(
            f"the checkpoint's optimizer has parameter groups of sizes {sizes}, this optimizer "
            f"{[len(g['params']) for g in optimizer.param_groups]}: build it the same way "
            "(llmlab.train.optim.build_optimizer), or load the weights alone (optimizer=None)"
        )
    groups, state = [], {}
    for saved_group, group in zip(saved["param_groups"], optimizer.param_groups, strict=True):
        fqns = [names[id(p)] for p in group["params"]]
        groups.append({**saved_group, "params": fqns})
        state.update({fqn: saved["state"][i] for i, fqn in zip(saved_group["params"], fqns,
                                                                 strict=True)
                      if i in saved["state"]})
    return {"state": state, "param_groups": groups}
