"""An LSTM language model, to compare with the transformer: parameters, FLOPs, and time.

Both spend about 6 FLOPs per parameter per trained token. The difference is the order of work:
an LSTM must finish position t before it can start t + 1 (its state carries the sequence), so a
long sequence is many small steps one after another; a transformer handles all positions of a
sequence at once in big matrix multiplies, which is what GPUs are built for.
"""

import torch
from torch import nn
from transformers.modeling_outputs import CausalLMOutput

from llmlab.models.loss import cross_entropy_on_ids


class LSTMLanguageModel(nn.Module):
    """Embedding -> n_layer LSTM layers of width d_model -> a linear head over the vocabulary.

    Called like a `transformers` causal LM: `model(input_ids=x, labels=x).loss`.
    """

    def __init__(self, vocab_size: int, d_model: int, n_layer: int, tied_embeddings: bool = True):
        super().__init__()
        for name, value in [("vocab_size", vocab_size), ("d_model", d_model), ("n_layer", n_layer)]:
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.embed = nn.Embedding(vocab_size, d_model)
        self.lstm = nn.LSTM(d_model, d_model, num_layers=n_layer, batch_first=True)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if tied_embeddings:
            self.head.weight = self.embed.weight

    def get_output_embeddings(self) -> nn.Linear:
        return self.head

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None):
        hidden, _ = self.lstm(self.embed(input_ids))
        logits = self.head(hidden)
        loss = None
        if labels is not None:  # predict token t + 1 from positions up to t
            loss = cross_entropy_on_ids(logits, labels)
        return CausalLMOutput(loss=loss, logits=logits)


def lstm_layer_parameters(d_in: int, d_model: int) -> int:
    """One LSTM layer: 4 gates, each with input and recurrent weights and two bias vectors."""
    return 4 * (d_in * d_model + d_model * d_model + 2 * d_model)


def lstm_flops_per_token(vocab_size: int, d_model: int, n_layer: int) -> int:
    """Training FLOPs per token: 6 per LSTM and head parameter (no attention term)."""
    matmul_params = n_layer * lstm_layer_parameters(d_model, d_model) + d_model * vocab_size
    return 6 * matmul_params
