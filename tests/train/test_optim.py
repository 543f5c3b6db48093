"""The optimizer the trainer builds: 8-bit AdamW (bitsandbytes) trains on a CPU."""


import pytest
from helpers.train_fakes import (
    RandomWindows,
    config,
    tiny_gpt2,
    token_stream,
)

from llmlab.train import (
    Trainer,
)


def test_8bit_adamw_trains_on_cpu():
    pytest.importorskip("bitsandbytes")
    trainer = Trainer(tiny_gpt2(width=64), config(optimizer="adam-8bit", max_steps=2),
                      RandomWindows(token_stream(), 4))
    assert len(trainer.fit().history) == 2
    assert type(trainer.optimizer).__name__ == "AdamW8bit"
