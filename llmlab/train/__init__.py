"""Training: the loop (loop.py), its settings (config.py), learning-rate schedules, the optimizer
(optim.py; Muon's Newton-Schulz iteration and its pairing with AdamW: muon.py), checkpoints
(their files: checkpoint.py; saving and resuming a run: checkpointer.py), metrics (one live run
per out_dir: run_folder.py), and LoRA adapters (lora.py).
`Trainer(model, TrainConfig(...), train_data, val_data).fit()`."""

from llmlab.train.checkpoint import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointMismatch,
    best_checkpoint,
    latest_checkpoint,
    load_checkpoint,
    newest_verified_checkpoint,
    save_checkpoint,
    sweep_stale_temporaries,
    verify_checkpoint,
)
from llmlab.train.checkpointer import EarlierRun
from llmlab.train.config import TrainConfig
from llmlab.train.loop import (
    BatchSource,
    Trainer,
    TrainingDiverged,
    TrainResult,
)
from llmlab.train.lora import LoRALinear, add_lora, merge_lora
from llmlab.train.metrics import StepMetrics, read_metrics
from llmlab.train.reshard import load_resharded
from llmlab.train.run_folder import RunFolderBusy
from llmlab.train.schedule import learning_rate, schedule_curve

__all__ = [
    "BatchSource",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointMismatch",
    "EarlierRun",
    "LoRALinear",
    "RunFolderBusy",
    "StepMetrics",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainingDiverged",
    "add_lora",
    "best_checkpoint",
    "latest_checkpoint",
    "learning_rate",
    "load_checkpoint",
    "load_resharded",
    "merge_lora",
    "newest_verified_checkpoint",
    "read_metrics",
    "save_checkpoint",
    "schedule_curve",
    "sweep_stale_temporaries",
    "verify_checkpoint",
]
