"""Checkpoints that survive a crash and refuse to load into the wrong model.

A checkpoint is a folder `step_NNNNNNN/` holding
  model.safetensors  the weights (safetensors: no code runs when it is read)
  state.pt           optimizer, grad scaler, RNG states, data position (read with weights_only)
  meta.json          step, validation loss, the model's signature, the training config
  checksums.sha256   the sha256 of each file above, in `sha256sum` format (`sha256sum -c` reads it)
A sharded run (FSDP) has no model.safetensors: each rank writes its own shard of the weights and
optimizer states into `dcp/` with `torch.distributed.checkpoint`, and the checksums cover every
file there. llmlab.train.reshard.load_resharded loads either kind into another number of
processes (weights and optimizer states; not each rank's data position and RNG).
It is written under a temporary name and renamed when complete, so a run killed half-way
through a save leaves the previous checkpoints untouched and loadable. A checkpoint damaged
later (a flipped bit, a truncated copy) fails its checksums and is never loaded.
"""

import json
import random
import re
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from torch.distributed.fsdp import FSDPModule

from llmlab.files import (
    FOLDER_CHECKSUMS,
    DamagedFile,
    read_checksums,
    remove_folder,
    remove_temporaries,
    replace_folder,
    temporary_sibling,
    verify_recorded,
    write_atomically,
    write_checksums,
)

STEP_DIR = re.compile(r"^step_(\d{7})$")
CHECKED_FILES = ("model.safetensors", "state.pt", "meta.json")
SHARDED_DIR = "dcp"  # a sharded checkpoint's weights and optimizer states, one file per rank
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


class CheckpointCorrupt(CheckpointError):
    """A file of the checkpoint is missing, unreadable, or differs from its recorded checksum."""

    def __init__(self, checkpoint: Path, file: str, problem: str):
        self.checkpoint, self.file, self.problem = Path(checkpoint), file, problem
        super().__init__(
            f"checkpoint {checkpoint} is damaged: {file} {problem}. Resume from an older "
            f"checkpoint (newest_verified_checkpoint finds the newest intact one), or delete "
            f"{checkpoint} and train from there."
        )

    def skip_line(self) -> str:
        """One line for a log: which checkpoint was passed over, and why."""
        return f"skipped checkpoint {self.checkpoint.name}: {self.file} {self.problem}"


def model_signature(model: torch.nn.Module) -> dict:
    """What must match for weights to load: the class, the config, every parameter's shape."""
    config = getattr(model, "config", None)
    config_dict = config.to_dict() if hasattr(config, "to_dict") else {}
    signature = {
        "class": _model_class(model).__name__,
        "config": {k: v for k, v in config_dict.items() if k not in IGNORED_CONFIG_KEYS},
        "shapes": {name: list(p.shape) for name, p in model.state_dict().items()},
    }
    return json.loads(json.dumps(signature))  # the form meta.json gives back (str keys, lists)


def _model_class(model: torch.nn.Module) -> type:
    """The model's own class: FSDP2's fully_shard swaps in a subclass (FSDPGPT2LMHeadModel), which
    would make a sharded run's checkpoint look like another model to a plain one."""
    return next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule))


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


def checkpoint_folders(root: Path) -> list[Path]:
    """Every step_NNNNNNN folder, oldest first (temporary folders of a killed save are not)."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if STEP_DIR.match(p.name)), key=lambda p: p.name)


def completed_checkpoints(root: Path) -> list[Path]:
    """Checkpoint folders with a meta.json, oldest first (not verified: see verify_checkpoint)."""
    return [p for p in checkpoint_folders(root) if (p / "meta.json").is_file()]


def latest_checkpoint(root: Path) -> Path | None:
    found = completed_checkpoints(Path(root))
    return found[-1] if found else None


def _read_best(root: Path) -> dict | None:
    """best.json's content; None when it is missing, damaged, or names no checkpoint folder."""
    try:
        best = json.loads((root / "best.json").read_text(encoding="utf-8"))
        name, val_loss = best["checkpoint"], float(best["val_loss"])
    except (OSError, ValueError, TypeError, KeyError):
        return None  # a damaged best.json counts as none: the next save writes a new one
    if not (isinstance(name, str) and STEP_DIR.match(name) and (root / name).is_dir()):
        return None
    return {"checkpoint": name, "val_loss": val_loss}


def best_checkpoint(root: Path) -> Path | None:
    best = _read_best(Path(root))
    return Path(root) / best["checkpoint"] if best else None


# ---------------------------------------------------------------- checksums


def is_sharded(checkpoint: Path) -> bool:
    """Whether the checkpoint's weights are shards in dcp/ (an FSDP run) or one safetensors."""
    return (Path(checkpoint) / SHARDED_DIR).is_dir()


def _files_to_check(folder: Path) -> list[str]:
    """The files whose checksums a checkpoint records: its weights (model.safetensors, or every
    file in dcp/), state.pt and meta.json."""
    if not is_sharded(folder):
        return list(CHECKED_FILES)
    shards = sorted(p for p in (folder / SHARDED_DIR).rglob("*") if p.is_file())
    return [p.relative_to(folder).as_posix() for p in shards] + list(CHECKED_FILES[1:])


def _required_files(recorded: dict[str, str]) -> list[str]:
    """What checksums.sha256 must list: a sharded checkpoint's dcp/.metadata names its shards."""
    weights = f"{SHARDED_DIR}/.metadata" if f"{SHARDED_DIR}/.metadata" in recorded else None
    return [weights or CHECKED_FILES[0], *CHECKED_FILES[1:]]


def _write_checksums(folder: Path) -> None:
    """Record the sha256 of each file, read back from disk: what a later load must find."""
    write_checksums(folder / FOLDER_CHECKSUMS, _files_to_check(folder))


def verify_checkpoint(path: Path) -> None:
    """Check every file of a checkpoint against the sha256 recorded when it was saved.

    Raises CheckpointCorrupt naming the first file that is missing, unreadable or changed.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointCorrupt(path, "the folder", "does not exist")
    checksums, artifact = path / FOLDER_CHECKSUMS, f"checkpoint {path}"
    try:
        recorded = read_checksums(checksums, artifact, remedy="")
        verify_recorded(checksums, recorded, _required_files(recorded), artifact, remedy="")
    except DamagedFile as error:  # a CheckpointError, whose message says how to resume
        raise CheckpointCorrupt(path, error.file, error.problem) from None


def newest_verified_checkpoint(
    root: Path, model: torch.nn.Module | None = None
) -> tuple[Path | None, list[str]]:
    """The newest checkpoint under `root` that verifies and, given `model`, was saved from a model
    like it (None if none is), and one line for each newer checkpoint passed over, saying why.

    A checkpoint of another model is passed over as a damaged one is: the run goes on from the
    older one that fits, instead of stopping at the newest."""
    skipped, wanted = [], None if model is None else model_signature(model)
    for path in reversed(checkpoint_folders(Path(root))):
        try:
            verify_checkpoint(path)
        except CheckpointCorrupt as error:
            skipped.append(error.skip_line())
            continue
        saved = _read_meta(path)["signature"]
        differences = [] if wanted is None else signature_differences(saved, wanted)
        if differences:
            more = f"; {len(differences) - 1} more differences" if len(differences) > 1 else ""
            skipped.append(f"skipped checkpoint {path.name}: saved from a different model "
                           f"({differences[0]}{more})")
            continue
        return path, skipped
    return None, skipped


def sweep_stale_temporaries(root: Path) -> list[Path]:
    """Delete what interrupted saves and prunes left under `root`; returns what was removed.

    Call it while holding the run folder's lock (llmlab.train.run_folder): only the run that
    holds it writes checkpoints there, so every temporary found then was left by a writer that
    is gone, never one still writing.
    """
    root = Path(root)
    return remove_temporaries(root) if root.is_dir() else []


def sharded_checkpoint_folder(root: Path, step: int) -> Path:
    """A new temporary folder for checkpoint `step`, for every rank to write its shards into
    (under SHARDED_DIR) before rank 0 completes it with `save_checkpoint(..., shards=folder)`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    temporary = temporary_sibling(root / f"step_{step:07d}")
    (temporary / SHARDED_DIR).mkdir(parents=True)
    return temporary


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    state: dict,
    *,
    val_loss: float | None = None,
    train_config: dict | None = None,
    keep_last: int = 2,
    shards: Path | None = None,
) -> Path:
    """Write checkpoint `step` atomically, update best.json, delete all but the last `keep_last`
    (the best one is always kept). `state` holds the optimizer, scaler, RNG and data states.

    shards: the folder from `sharded_checkpoint_folder` that already holds the weights (a
    sharded run); without it the weights are written here as model.safetensors."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:07d}"
    # Not a step_NNNNNNN name: never taken for a checkpoint until renamed.
    temporary = shards or temporary_sibling(final)
    if shards is None:
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
    _write_checksums(temporary)
    replace_folder(temporary, final)  # the same step saved again (after a resume) is replaced whole
    _update_best(root, final, val_loss)
    _prune(root, keep_last, final)
    return final


def _update_best(root: Path, checkpoint: Path, val_loss: float | None) -> None:
    if val_loss is None:
        return
    best = _read_best(root)
    if best is not None and best["val_loss"] <= val_loss:
        return
    best = {"checkpoint": checkpoint.name, "val_loss": val_loss}
    write_atomically(root / "best.json", json.dumps(best, indent=2).encode())  # old or new


def _prune(root: Path, keep_last: int, fresh: Path) -> None:
    """Delete the checkpoints older than the newest `keep_last` that verify; keep the best one
    and `fresh` (just written and checksummed: it counts as intact without re-reading it).

    A damaged checkpoint does not count towards `keep_last`, so the last intact one is never
    deleted in its favour; a damaged one older than those kept is deleted.
    """
    best, intact = best_checkpoint(root), 0
    for path in reversed(checkpoint_folders(root)):
        if intact >= keep_last and path not in (best, fresh):
            remove_folder(path)  # renamed first: a killed prune leaves no half-deleted checkpoint
        elif path == fresh or _verifies(path):
            intact += 1


def _verifies(path: Path) -> bool:
    try:
        verify_checkpoint(path)
    except CheckpointCorrupt:
        return False
    return True


def load_checkpoint(path: Path, model: torch.nn.Module) -> dict:
    """Load the weights into `model` (after verifying the files' checksums and that the weights
    belong to this model); return the state dict (optimizer, scaler, rng, data, step) for the
    trainer to restore. A sharded checkpoint's weights are left for the caller to load from
    dcp/ (with torch.distributed.checkpoint, on every rank)."""
    path = Path(path)
    check_belongs_to(path, model)
    if not is_sharded(path):
        load_model(model, str(path / "model.safetensors"), strict=True)
    return load_state(path)


def load_state(path: Path) -> dict:
    # weights_only: only tensors and plain containers are unpickled, never arbitrary objects.
    # map_location: every tensor to the CPU, whatever device saved it, so a checkpoint written on
    # a GPU loads where there is none. The RNG states must be CPU tensors anyway, and
    # optimizer.load_state_dict moves each state to its parameter's device.
    return torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=True)


def check_belongs_to(path: Path, model: torch.nn.Module) -> dict:
    """Verify the checkpoint's checksums and that it was saved from a model like `model` (class,
    config, every tensor's full shape); return its meta.json. CheckpointCorrupt or
    CheckpointMismatch otherwise."""
    verify_checkpoint(path)  # before anything is read: damaged weights are refused, not loaded
    meta = _read_meta(path)
    differences = signature_differences(meta["signature"], model_signature(model))
    if differences:
        listing = "\n  ".join(differences[:12])
        raise CheckpointMismatch(
            f"{path} was saved from a different model, so it cannot be loaded into this one:\n"
            f"  {listing}\nBuild the model with the checkpoint's configuration "
            f"(see {Path(path) / 'meta.json'}), or start a fresh run in another out_dir."
        )
    return meta


def _read_meta(path: Path) -> dict:
    return json.loads((Path(path) / "meta.json").read_text(encoding="utf-8"))
