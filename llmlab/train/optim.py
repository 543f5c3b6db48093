"""AdamW with weight decay on the weight matrices only, its 8-bit version from bitsandbytes
("adam-8bit", the planner's name for it), Muon for the blocks' matrices with AdamW for the rest
("muon"), or, to compare with, SGD with momentum and Adam."""

from collections.abc import Iterable

import torch

from llmlab.device import choose_dtype
from llmlab.distributed.data_parallel import make_optimizer
from llmlab.memory import optimizer_by_name
from llmlab.models import matrices_and_others
from llmlab.train.config import TrainConfig
from llmlab.train.muon import FP32Muon, MuonWithAdamW


def parameter_groups(parameters: Iterable[torch.nn.Parameter], weight_decay: float) -> list[dict]:
    """Decay matrices (linear and embedding weights); leave biases and norm gains alone.

    Decay pulls weights toward zero; on a bias or a LayerNorm gain that only removes useful
    freedom, so the usual practice (GPT-2, nanoGPT, Llama) is to decay tensors with 2+ dims.
    """
    trainable = [p for p in parameters if p.requires_grad]
    return [
        {"params": [p for p in trainable if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in trainable if p.dim() < 2], "weight_decay": 0.0},
    ]


def build_optimizer(
    model: torch.nn.Module, config: TrainConfig, strategy: str = "none"
) -> torch.optim.Optimizer | MuonWithAdamW:
    """strategy: how the model is parallel ("none", "ddp", "zero1", "fsdp"); "zero1" shards the
    AdamW (or Muon) states over the ranks (llmlab.distributed.data_parallel.make_optimizer)."""
    if config.optimizer == "muon":
        return muon_with_adamw(model, config, strategy)
    groups = parameter_groups(model.parameters(), config.weight_decay)
    if config.optimizer in ("adam-8bit", "adam"):
        return optimizer_by_name(groups, config.optimizer, lr=config.lr, betas=config.betas)
    if config.optimizer == "sgd-momentum":
        return optimizer_by_name(groups, "sgd-momentum", lr=config.lr)
    # fused: one kernel updates every tensor (about 8x faster than the per-tensor loop on this
    # course's CPU model); PyTorch has it for CPU and CUDA parameters, not for FSDP's DTensors.
    fused = strategy != "fsdp"
    return make_optimizer(model, strategy, groups, lr=config.lr, betas=config.betas, fused=fused)


def newton_schulz_dtype(device: torch.device | str) -> str:
    """The dtype Muon's Newton-Schulz iteration runs in on `device` ("bf16" or "fp32", as
    llmlab.memory's TrainingSetup names it): torch's runs in bf16; where the course's dtype rule
    says bf16 would be emulated (a CPU without bf16 instructions), the same step in fp32
    (FP32Muon) is about 100x faster."""
    return "bf16" if choose_dtype(torch.device(device)).dtype == torch.bfloat16 else "fp32"


def muon_with_adamw(model: torch.nn.Module, config: TrainConfig, strategy: str) -> MuonWithAdamW:
    """Muon for the blocks' weight matrices (llmlab.models.block_matrices), AdamW for the rest,
    with the config's one learning rate and weight decay. "zero1" shards both over the ranks by
    whole parameters (ZeroRedundancyOptimizer): each rank orthogonalises the matrices it owns,
    then broadcasts them (Lab 04 checks it against one process)."""
    if strategy == "fsdp":
        raise ValueError(
            "optimizer='muon' cannot train under parallel='fsdp': FSDP2 cuts every weight matrix "
            "into flat shards, and Muon's Newton-Schulz iteration needs each matrix whole; use "
            "parallel='zero1' (Muon's states sharded by whole matrices) or 'ddp'"
        )
    matrices, others = matrices_and_others(model)
    fast_bf16 = not matrices or newton_schulz_dtype(matrices[0].device) == "bf16"
    muon_class = torch.optim.Muon if fast_bf16 else FP32Muon
    # Moonshot's "match_rms_adamw" scales Muon's step to the size of an AdamW step, so the
    # learning rate and weight decay tuned for AdamW serve both optimizers.
    muon = make_optimizer(model, strategy, matrices, optimizer_class=muon_class, lr=config.lr,
                          weight_decay=config.weight_decay, adjust_lr_fn="match_rms_adamw")
    adamw = make_optimizer(model, strategy, parameter_groups(others, config.weight_decay),
                           optimizer_class=torch.optim.AdamW, lr=config.lr, betas=config.betas,
                           fused=True)
    return MuonWithAdamW(muon, adamw)
