"""TrainConfig: bad settings are refused with the field named, and its optimizer names are the
planner's and DeepSpeed's."""


import pytest
from helpers.train_fakes import (
    config,
)

from llmlab.train import (
    TrainConfig,
)


@pytest.mark.parametrize(
    "bad", [dict(max_steps=0), dict(schedule="linear"), dict(dtype="fp8"), dict(lr=-1.0),
            dict(optimizer="lion"), dict(grad_clip=0.0), dict(nan_policy="ignore")],
)  # fmt: skip
def test_bad_settings_are_refused_with_the_field_named(bad):
    field = next(iter(bad))
    with pytest.raises(ValueError, match=field):
        config(**bad)


def test_the_trainer_the_planner_and_deepspeed_name_optimizers_alike():
    """One vocabulary: a name the trainer or a DeepSpeed config takes is one the planner prices."""
    from llmlab.distributed.deepspeed_config import OPTIMIZERS as DEEPSPEED
    from llmlab.memory import OPTIMIZER_STATES
    from llmlab.train.config import OPTIMIZERS as TRAINER

    assert set(TRAINER) | set(DEEPSPEED) <= set(OPTIMIZER_STATES)
    with pytest.raises(ValueError, match="adam-8bit"):
        TrainConfig(optimizer="adamw8bit")  # the trainer's old name for it
