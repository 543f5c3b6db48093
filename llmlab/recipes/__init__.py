"""The course's training recipes, between the libraries and the course, so `llmlab train` and the
labs share them: Lab 03's pretraining recipe (pretraining), how long a run is (budget), its
batches from Lab 01's dataset (batches), where what they build is kept (artifacts), and what comes
from the Hugging Face Hub behind the online switch (hub)."""

from llmlab.recipes.artifacts import ARTIFACTS_VARIABLE, artifacts_dir, where_artifacts_live
from llmlab.recipes.batches import Lab03Data, lab03_data
from llmlab.recipes.budget import RATE_GPU, RATE_MFU, TrainingBudget, training_budget
from llmlab.recipes.hub import (
    HUB_MODEL,
    HubTask,
    hub_model,
    hub_task,
    hub_tokenizer,
    published_references,
)
from llmlab.recipes.pretraining import (
    FULL_PASSES,
    FULL_TRAIN_TOKENS,
    MODEL_PRESET,
    RECIPES,
    full_budget,
    lab03_config,
    lab03_shape,
    micro_batch_for,
)

__all__ = [
    "ARTIFACTS_VARIABLE", "FULL_PASSES", "FULL_TRAIN_TOKENS", "HUB_MODEL", "HubTask", "Lab03Data",
    "MODEL_PRESET", "RATE_GPU", "RATE_MFU", "RECIPES", "TrainingBudget", "artifacts_dir",
    "full_budget", "hub_model", "hub_task", "hub_tokenizer", "lab03_config", "lab03_data",
    "lab03_shape", "micro_batch_for", "published_references", "training_budget",
    "where_artifacts_live",
]
