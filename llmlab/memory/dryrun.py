"""Measure a real training step of a model shape: on this machine, or as a dry run.

`measure` builds the model and runs two real steps (the first creates the optimizer's state).
`dry_run` runs the very same code under FakeTensorMode: every tensor has a shape, a dtype and a
size in bytes but no memory and no values, so a 7B model's step "runs" on a laptop in seconds and
the tracker still sees every allocation. (Fake tensors cannot be read: no loss value, no `.item()`.)
"""

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from llmlab.device import TORCH_DTYPES
from llmlab.memory.estimate import TrainingSetup
from llmlab.memory.measure import MeasuredStep, measure_training_step
from llmlab.memory.optimizers import optimizer_by_name
from llmlab.models import ModelShape, as_shape, build_model, enable_activation_checkpointing


def _check_measurable(setup: TrainingSetup) -> None:
    if setup.gpus > 1 or setup.zero or setup.lora_rank:
        raise ValueError(
            "a measurement runs one device without ZeRO or LoRA: use gpus=1, zero=0, lora_rank=0 "
            "(the estimator covers the rest)"
        )
    if setup.dtype != "fp32" and setup.master_weights and not setup.fp32_grads:
        raise ValueError(
            "16-bit weights with separate fp32 master weights is what DeepSpeed and Megatron do; "
            "plain PyTorch runs fp32, pure 16-bit (master_weights=False) or torch.autocast "
            "(fp32_grads=True)"
        )


def prepare(
    model: str | ModelShape, setup: TrainingSetup, device: torch.device | str = "cpu"
) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.dtype]:
    """Model, optimizer, a batch of token ids and the autocast dtype for one step of `setup`."""
    shape = as_shape(model)
    _check_measurable(setup)
    autocast_dtype = TORCH_DTYPES[setup.dtype] if setup.fp32_grads else torch.float32
    weights_dtype = torch.float32 if setup.fp32_grads else TORCH_DTYPES[setup.dtype]
    built = build_model(shape, device, weights_dtype, setup.attention)
    if setup.checkpointing:
        enable_activation_checkpointing(built)
    optimizer = optimizer_by_name(built.parameters(), setup.optimizer, setup.fused_optimizer)
    seq = setup.seq or shape.context
    input_ids = torch.randint(0, shape.vocab_size, (setup.batch, seq), device=device)
    return built, optimizer, input_ids, autocast_dtype


def measure(
    model: str | ModelShape,
    setup: TrainingSetup | None = None,
    device: torch.device | str = "cpu",
    **changes,
) -> MeasuredStep:
    """Build `model` on `device` and measure a real training step of `setup`."""
    setup = (setup or TrainingSetup()).replace(**changes)
    built, optimizer, input_ids, autocast_dtype = prepare(model, setup, device)
    return measure_training_step(built, optimizer, input_ids, autocast_dtype)


def dry_run(model: str | ModelShape, setup: TrainingSetup | None = None, **changes) -> MeasuredStep:
    """The same step on fake tensors: the peak of a model too big for this machine."""
    setup = (setup or TrainingSetup()).replace(**changes)
    if setup.optimizer == "adam-8bit":
        raise ValueError("bitsandbytes' 8-bit kernels cannot run on fake tensors: no dry run")
    with FakeTensorMode():
        return measure(model, setup, "cpu")
