"""AdamW with weight decay on the weight matrices only, or its 8-bit version from bitsandbytes
("adam-8bit", the planner's name for it)."""

import torch

from llmlab.distributed.data_parallel import make_optimizer
from llmlab.memory import optimizer_by_name
from llmlab.train.config import TrainConfig


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices (linear and embedding weights); leave biases and norm gains alone.

    Decay pulls weights toward zero; on a bias or a LayerNorm gain that only removes useful
    freedom, so the usual practice (GPT-2, nanoGPT, Llama) is to decay tensors with 2+ dims.
    """
    trainable = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in trainable if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in trainable if p.dim() < 2], "weight_decay": 0.0},
    ]


def build_optimizer(
    model: torch.nn.Module, config: TrainConfig, strategy: str = "none"
) -> torch.optim.Optimizer:
    """strategy: how the model is parallel ("none", "ddp", "zero1", "fsdp"); "zero1" shards the
    AdamW states over the ranks (llmlab.distributed.data_parallel.make_optimizer)."""
    groups = parameter_groups(model, config.weight_decay)
    if config.optimizer == "adam-8bit":
        return optimizer_by_name(groups, "adam-8bit", lr=config.lr, betas=config.betas)
    # fused: one kernel updates every tensor (about 8x faster than the per-tensor loop on this
    # course's CPU model); PyTorch has it for CPU and CUDA parameters, not for FSDP's DTensors.
    fused = strategy != "fsdp"
    return make_optimizer(model, strategy, groups, lr=config.lr, betas=config.betas, fused=fused)
