"""Training memory: estimate it by formula (a training step, and a GRPO step with its rollouts'
KV cache), measure it (a tensor tracker on any device, a dry run on fake tensors), see which GPUs
it fits, and turn an out-of-memory error into options."""

from llmlab.memory.dryrun import dry_run, measure, prepare
from llmlab.memory.estimate import (
    CUDA_CONTEXT_BYTES,
    DTYPE_BYTES,
    GB,
    WEIGHT_BITS_4BIT,
    MemoryEstimate,
    TrainingSetup,
    block_activation_bytes,
    bytes_per_parameter,
    check_tensor_parallel,
    estimate_memory,
    head_activation_bytes,
    layer_activations,
    model_setup_problem,
    model_states,
    tensor_parallel_problem,
)
from llmlab.memory.gpus import GPU_SIZES_GB, fit_table, fits, gpus_with
from llmlab.memory.grpo import (
    GRPO_PHASES,
    GRPOMemoryEstimate,
    Moment,
    estimate_grpo_memory,
    kv_cache_bytes,
)
from llmlab.memory.measure import (
    MeasuredStep,
    MemoryTracker,
    measure_training_step,
    training_step,
)
from llmlab.memory.oom import Option, OutOfMemoryWithAdvice, memory_options, oom_advice
from llmlab.memory.optimizers import (
    DEEPSPEED_OPTIMIZERS,
    OPTIMIZER_STATES,
    REFERENCE_OPTIMIZERS,
    TRAINER_OPTIMIZERS,
    optimizer_by_name,
)

__all__ = [
    "CUDA_CONTEXT_BYTES", "DEEPSPEED_OPTIMIZERS", "DTYPE_BYTES", "GB", "GPU_SIZES_GB",
    "GRPO_PHASES", "OPTIMIZER_STATES", "REFERENCE_OPTIMIZERS", "TRAINER_OPTIMIZERS",
    "WEIGHT_BITS_4BIT", "GRPOMemoryEstimate", "MeasuredStep", "MemoryEstimate", "MemoryTracker",
    "Moment", "Option", "OutOfMemoryWithAdvice", "TrainingSetup", "block_activation_bytes",
    "bytes_per_parameter", "check_tensor_parallel", "dry_run", "estimate_grpo_memory",
    "estimate_memory", "fit_table", "fits", "gpus_with", "head_activation_bytes", "kv_cache_bytes",
    "layer_activations", "measure", "measure_training_step", "memory_options",
    "model_setup_problem", "model_states", "oom_advice", "optimizer_by_name", "prepare",
    "tensor_parallel_problem", "training_step",
]
