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
)
def test_bad_settings_are_refused_with_the_field_named(bad):
    field = next(iter(bad))
    with pytest.raises(ValueError, match=field):
        config(**bad)


def test_the_trainer_refuses_an_optimizer_name_outside_the_vocabulary():
    with pytest.raises(ValueError, match="adam-8bit"):
        TrainConfig(optimizer="adamw8bit")  # the trainer's old name for it


@pytest.mark.parametrize("name", ["sgd-momentum", "adam"])
def test_zero1_refuses_an_optimizer_it_would_not_shard(name):
    with pytest.raises(ValueError, match="would keep all of its states on every rank"):
        TrainConfig(optimizer=name, parallel="zero1")
    assert TrainConfig(optimizer=name, parallel="ddp").optimizer == name
