"""Checkpoints that survive a crash and refuse to load into the wrong model.

A checkpoint is a folder `step_NNNNNNN/` holding
  model.safetensors  the weights (safetensors: no code runs when it is read)
  state.pt           optimizer, grad scaler, RNG states, data position (read with weights_only)
  meta.json          step, validation loss, the model's signature, the training config
It is written under a temporary name and renamed when complete, so a run killed half-way
through a save leaves the previous checkpoints untouched and loadable.
"""

import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_model, save_model

from llmlab.data.atomic import replace_folder, temporary_sibling, write_atomically

STEP_DIR = re.compile(r"^step_(\d{7})$")
IGNORED_CONFIG_KEYS = {
    "transformers_version",
    "_name_or_path",
    "architectures",
    "dtype",
    "torch_dtype",
    "use_cache",
    "output_hidden_states",
    "return_dict",
    "id2label",
    "label2id",
}


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or unreadable."""


class CheckpointMismatch(CheckpointError):
    """The checkpoint was made for another model or configuration."""


def model_signature(model: torch.nn.Module) -> dict:
    """What must match for weights to load: the class, the config, every parameter's shape."""
    config = getattr(model, "config", None)
    config_dict = config.to_dict() if hasattr(config, "to_dict") else {}
    signature = {
        "class": type(model).__name__,
        "config": {k: v for k, v in config_dict.items() if k not in IGNORED_CONFIG_KEYS},
        "shapes": {name: list(p.shape) for name, p in model.state_dict().items()},
    }
    return json.loads(json.dumps(signature))  # the form meta.json gives back (str keys, lists)


def signature_differences(saved: dict, current: dict) -> list[str]:
    """Human-readable differences, config fields first (they explain the shape changes)."""
    differences = []
    if saved["class"] != current["class"]:
        differences.append(f"model class: checkpoint {saved['class']}, model {current['class']}")
    for key in sorted(set(saved["config"]) | set(current["config"])):
        old, new = saved["config"].get(key), current["config"].get(key)
        if old != new:
            differences.append(f"config.{key}: checkpoint {old!r}, model {new!r}")
    for name in sorted(set(saved["shapes"]) | set(current["shapes"])):
        old, new = saved["shapes"].get(name), current["shapes"].get(name)
        if old != new:
            differences.append(f"{name}: checkpoint shape {old}, model shape {new}")
    return differences


def capture_rng() -> dict:
    """Every random generator a training step draws from (dropout, data sampling, init)."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        # numpy's state holds an ndarray, which weights_only loading refuses: store a tensor.
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    random.setstate(state["python"])
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def completed_checkpoints(root: Path) -> list[Path]:
    """Finished checkpoint folders, oldest first (temporary folders of a killed save are not)."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if STEP_DIR.match(p.name) and (p / "meta.json").is_file()]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(root: Path) -> Path | None:
    found = completed_checkpoints(Path(root))
    return found[-1] if found else None


def best_checkpoint(root: Path) -> Path | None:
    best_file = Path(root) / "best.json"
    if not best_file.is_file():
        return None
    path = Path(root) / json.loads(best_file.read_text(encoding="utf-8"))["checkpoint"]
    return path if path.is_dir() else None


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    state: dict,
    *,
    val_loss: float | None = None,
    train_config: dict | None = None,
    keep_last: int = 2,
) -> Path:
    """Write checkpoint `step` atomically, update best.json, delete all but the last `keep_last`
    (the best one is always kept). `state` holds the optimizer, scaler, RNG and data states."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:07d}"
    temporary = temporary_sibling(final)  # not a step_NNNNNNN name: never taken for a checkpoint
    temporary.mkdir()
    save_model(model, str(temporary / "model.safetensors"))  # handles tied (shared) weights
    torch.save({**state, "step": step}, temporary / "state.pt")
    meta = {
        "step": step,
        "val_loss": val_loss,
        "signature": model_signature(model),
        "train_config": train_config,
    }
    (temporary / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    replace_folder(temporary, final)  # the same step saved again (after a resume) is replaced whole
    _update_best(root, final, val_loss)
    _prune(root, keep_last)
    return final


def _update_best(root: Path, checkpoint: Path, val_loss: float | None) -> None:
    if val_loss is None:
        return
    best_file = root / "best.json"
    if best_file.is_file():
        best = json.loads(best_file.read_text(encoding="utf-8"))
        if (root / best["checkpoint"]).is_dir() and best["val_loss"] <= val_loss:
            return
    best = {"checkpoint": checkpoint.name, "val_loss": val_loss}
    write_atomically(best_file, json.dumps(best, indent=2).encode())  # old or new, never half


def _prune(root: Path, keep_last: int) -> None:
    best = best_checkpoint(root)
    for old in completed_checkpoints(root)[:-keep_last]:
        if old != best:
            shutil.rmtree(old)


def load_checkpoint(path: Path, model: torch.nn.Module) -> dict:
    """Load the weights into `model` (after checking they belong to it); return the state dict
    (optimizer, scaler, rng, data, step) for the trainer to restore."""
    path = Path(path)
    meta_file, weights, state_file = (
        path / "meta.json",
        path / "model.safetensors",
        path / "state.pt",
    )
    for needed in (meta_file, weights, state_file):
        if not needed.is_file():
            raise CheckpointError(
                f"{path} is not a complete checkpoint ({needed.name} is missing); use "
                f"latest_checkpoint(...) to find the newest complete one"
            )
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    differences = signature_differences(meta["signature"], model_signature(model))
    if differences:
        listing = "\n  ".join(differences[:12])
        raise CheckpointMismatch(
            f"{path} was saved from a different model, so it cannot be loaded into this one:\n"
            f"  {listing}\nBuild the model with the checkpoint's configuration "
            f"(see {meta_file}), or start a fresh run in another out_dir."
        )
    load_model(model, str(weights), strict=True)
    # weights_only: only tensors and plain containers are unpickled, never arbitrary objects.
    return torch.load(state_file, weights_only=True)
