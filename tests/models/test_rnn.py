"""The LSTM language model's parameter and FLOP counts."""

import pytest
import torch

from llmlab import models


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")
def test_lstm_counts_and_flops():
    model = models.LSTMLanguageModel(vocab_size=512, d_model=64, n_layer=2)
    counts = models.count_model_parameters(model)
    assert counts.embedding == 512 * 64  # the head is tied to the embedding
    assert counts.non_embedding == 2 * models.lstm_layer_parameters(64, 64)
    x = torch.randint(0, 512, (2, 16))
    # The CPU's oneDNN LSTM is a single op FlopCounterMode cannot see into; without oneDNN the
    # LSTM runs as matmuls, which it counts.
    with torch.backends.mkldnn.flags(enabled=False):
        measured = models.measure_training_flops(model, x) / x.numel()
    # 1.7% below the formula: biases are not matmul weights, and at the first position there is
    # no earlier state to send a gradient to, so that recurrent matmul is skipped.
    assert measured == pytest.approx(models.lstm_flops_per_token(512, 64, 2), rel=0.02)
