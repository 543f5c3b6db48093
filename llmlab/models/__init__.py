"""Model presets and builders (through `transformers` configs), parameter and FLOP counts, the one
next-token loss, eval mode with the training flag restored, one way to call Hugging Face's
`generate` (one prompt, or a batch of one length that gives the same ids), and an LSTM language
model to compare with the transformer."""

from llmlab.models.blocks import (
    BLOCK_MATRIX_TYPES,
    block_matrices,
    input_dim,
    linear_from_conv1d,
    matrices_and_others,
    named_blocks,
    transformer_blocks,
)
from llmlab.models.counts import (
    FlopCounts,
    ParamCounts,
    block_parameters,
    count_active_parameters,
    count_model_parameters,
    count_parameters,
    expert_parameters,
    measure_training_flops,
    parameter_table,
    stage_parameters,
    training_flops_per_token,
)
from llmlab.models.eval_mode import eval_mode
from llmlab.models.generation import generate_batch, generate_continuation
from llmlab.models.loss import cross_entropy_on_ids, next_token_cross_entropy, next_token_loss
from llmlab.models.presets import (
    ATTENTION,
    PRESETS,
    SMOKE_VOCAB,
    ModelShape,
    as_shape,
    build_model,
    enable_activation_checkpointing,
    model_shape,
    preset,
)
from llmlab.models.rnn import LSTMLanguageModel, lstm_flops_per_token, lstm_layer_parameters

__all__ = [
    "ATTENTION", "BLOCK_MATRIX_TYPES", "PRESETS", "SMOKE_VOCAB", "FlopCounts", "LSTMLanguageModel",
    "ModelShape", "ParamCounts", "as_shape", "block_matrices", "block_parameters", "build_model",
    "count_active_parameters", "count_model_parameters", "count_parameters",
    "cross_entropy_on_ids", "enable_activation_checkpointing", "eval_mode", "expert_parameters",
    "generate_batch", "generate_continuation",
    "input_dim", "linear_from_conv1d", "lstm_flops_per_token", "lstm_layer_parameters",
    "matrices_and_others", "measure_training_flops", "model_shape", "named_blocks",
    "next_token_cross_entropy", "next_token_loss", "parameter_table", "preset", "stage_parameters",
    "training_flops_per_token", "transformer_blocks",
]
