"""The optimizer the trainer builds: 8-bit AdamW (bitsandbytes) trains on a CPU; SGD with momentum
and Adam (Lab 03's comparison) are built from the config, with weight decay on matrices only."""

import pytest
import torch
from helpers.train_fakes import (
    RandomWindows,
    config,
    tiny_gpt2,
    token_stream,
)

from llmlab.train import (
    Trainer,
)
from llmlab.train.optim import build_optimizer


def test_8bit_adamw_trains_on_cpu():
    pytest.importorskip("bitsandbytes")
    trainer = Trainer(tiny_gpt2(width=64), config(optimizer="adam-8bit", max_steps=2),
                      RandomWindows(token_stream(), 4))
    assert len(trainer.fit().history) == 2
    assert type(trainer.optimizer).__name__ == "AdamW8bit"


@pytest.mark.parametrize(("name", "kind"), [("sgd-momentum", torch.optim.SGD),
                                             ("adam", torch.optim.Adam)])
def test_sgd_with_momentum_and_adam_take_the_configs_rate_and_decay(name, kind):
    settings = config(optimizer=name, lr=0.05, weight_decay=0.1, betas=(0.8, 0.9))
    optimizer = build_optimizer(tiny_gpt2(), settings)
    assert type(optimizer) is kind  # Adam, not its subclass AdamW: decay added to the gradient
    matrices, others = optimizer.param_groups
    assert all(p.dim() >= 2 for p in matrices["params"]) and matrices["weight_decay"] == 0.1
    assert all(p.dim() < 2 for p in others["params"]) and others["weight_decay"] == 0.0
    assert matrices["lr"] == 0.05
    if name == "sgd-momentum":
        assert matrices["momentum"] == 0.9
    else:
        assert matrices["betas"] == (0.8, 0.9)
