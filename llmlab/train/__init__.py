"""Training: the loop (loop.py), its settings (config.py), learning-rate schedules, the optimizer,
checkpoints and metrics (one live run per out_dir: run_folder.py).
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
from llmlab.train.config import TrainConfig
from llmlab.train.loop import (
    BatchSource,
    EarlierRun,
    Trainer,
    TrainingDiverged,
    TrainResult,
    next_token_loss,
)
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
    "RunFolderBusy",
    "StepMetrics",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainingDiverged",
    "best_checkpoint",
    "latest_checkpoint",
    "learning_rate",
    "load_checkpoint",
    "load_resharded",
    "newest_verified_checkpoint",
    "next_token_loss",
    "read_metrics",
    "save_checkpoint",
    "schedule_curve",
    "sweep_stale_temporaries",
    "verify_checkpoint",
]
