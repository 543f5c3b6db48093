"""Training: the loop (loop.py), its settings (config.py), learning-rate schedules, the optimizer,
checkpoints and metrics. `Trainer(model, TrainConfig(...), train_data, val_data).fit()`."""

from llmlab.train.checkpoint import (
    CheckpointError,
    CheckpointMismatch,
    best_checkpoint,
    latest_checkpoint,
    load_checkpoint,
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
from llmlab.train.metrics import StepMetrics
from llmlab.train.schedule import learning_rate, schedule_curve

__all__ = [
    "BatchSource",
    "CheckpointError",
    "CheckpointMismatch",
    "EarlierRun",
    "StepMetrics",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainingDiverged",
    "best_checkpoint",
    "latest_checkpoint",
    "learning_rate",
    "load_checkpoint",
    "next_token_loss",
    "schedule_curve",
]
