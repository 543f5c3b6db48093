"""A DeepSpeed config JSON written from the memory planner's `TrainingSetup`.

DeepSpeed reads everything about a run from one JSON file: batch sizes, precision, optimizer,
clipping and the ZeRO stage. Writing it from the same `TrainingSetup` that `estimate_memory`
planned makes the plan and the run describe one set-up. Key names follow DeepSpeed's
configuration reference (deepspeed.ai/docs/config-json).
"""

import json
import warnings
from pathlib import Path

from llmlab.files import write_atomically
from llmlab.memory import DEEPSPEED_OPTIMIZERS, TrainingSetup
from llmlab.models import ModelShape, as_shape, count_parameters

DEVICES = ("cuda", "cpu")


def deepspeed_config(
    setup: TrainingSetup,
    model: str | ModelShape | None = None,
    *,
    lr: float = 3e-4,
    betas: tuple[float, float] = (0.9, 0.95),
    eps: float = 1e-8,
    weight_decay: float = 0.1,
    grad_clip: float = 1.0,
    device: str = "cuda",
) -> dict:
    """The DeepSpeed config (a dict, ready for `deepspeed.initialize(config=...)` or
    `write_deepspeed_config`) for training as `setup` says, on `device`.

    `setup.gpus` ranks each take `setup.batch` sequences per micro-batch; `model` (a preset name
    or shape), when given, sizes ZeRO's communication buckets from the model's width.
    """
    _check(setup, device, grad_clip, lr)
    if setup.zero and setup.data_parallel == 1:
        warnings.warn(
            f"ZeRO-{setup.zero} shards over data-parallel ranks, and this set-up has one "
            f"(gpus={setup.gpus}, tensor_parallel={setup.tensor_parallel}): nothing is sharded",
            stacklevel=2,
        )
    zero: dict = {
        "stage": setup.zero,
        "offload_optimizer": {"device": "none"},  # no offload to CPU memory: as planned
        "contiguous_gradients": True,  # gradients copied into one buffer: less fragmentation
        "overlap_comm": False,  # simpler to follow and to measure; True hides it behind compute
    }
    if setup.zero == 3:
        zero["offload_param"] = {"device": "none"}
    if model is not None:
        zero.update(_bucket_sizes(as_shape(model), setup.zero))
    config = {
        # DeepSpeed checks train_batch_size = micro-batch x accumulation x data-parallel ranks.
        "train_batch_size": setup.batch * setup.grad_accumulation * setup.data_parallel,
        "train_micro_batch_size_per_gpu": setup.batch,
        "gradient_accumulation_steps": setup.grad_accumulation,
        "optimizer": _optimizer(setup.optimizer, lr, betas, eps, weight_decay),
        "gradient_clipping": grad_clip,
        "bf16": {"enabled": setup.dtype == "bf16"},
        # Dynamic loss scaling (loss_scale 0), starting at 2^16: fp16's small range needs it.
        "fp16": {"enabled": setup.dtype == "fp16", "loss_scale": 0, "initial_scale_power": 16},
        "zero_optimization": zero,
        "steps_per_print": 10**9,  # the course prints its own progress
        "wall_clock_breakdown": False,
    }
    if setup.optimizer.startswith("sgd"):
        # ZeRO runs any torch optimizer on its shard; SGD is just not on DeepSpeed's tested list.
        config["zero_allow_untested_optimizer"] = True
    return config


def _optimizer(name: str, lr: float, betas, eps: float, weight_decay: float) -> dict:
    """The optimizer block: torch.optim's classes, by the names DeepSpeed passes on to them."""
    if name.startswith("sgd"):
        momentum = 0.9 if name == "sgd-momentum" else 0.0
        return {"type": "SGD", "params": {"lr": lr, "momentum": momentum}}
    adam = {"lr": lr, "betas": list(betas), "eps": eps, "weight_decay": weight_decay,
            # torch.optim's Adam(W), not DeepSpeed's FusedAdam or DeepSpeedCPUAdam: those are
            # C++/CUDA ops compiled on first use (minutes, and a compiler on the machine).
            "torch_adam": True}
    if name == "adam":
        adam["adam_w_mode"] = False  # DeepSpeed's "Adam" means AdamW unless told otherwise
    return {"type": "AdamW" if name == "adamw" else "Adam", "params": adam}


def _check(setup: TrainingSetup, device: str, grad_clip: float, lr: float) -> None:
    """Refuse set-ups DeepSpeed cannot run as the planner describes them."""
    if not isinstance(setup, TrainingSetup):
        raise TypeError(
            f"expected a llmlab.memory.TrainingSetup, got {type(setup).__name__}: "
            "build one with TrainingSetup(batch=..., dtype=..., zero=..., gpus=...)"
        )
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}: use one of {DEVICES}")
    if setup.optimizer not in DEEPSPEED_OPTIMIZERS:
        raise ValueError(
            f"optimizer {setup.optimizer!r} has no DeepSpeed config here: use one of "
            f"{DEEPSPEED_OPTIMIZERS} (or pass your own optimizer to deepspeed.initialize)"
        )
    if setup.dtype == "fp16" and device == "cpu":
        raise ValueError("DeepSpeed's CPU accelerator cannot train in fp16: use 'bf16' or 'fp32'")
    if setup.dtype != "fp32" and not setup.master_weights:
        raise ValueError(
            f"DeepSpeed's {setup.dtype} mode always keeps fp32 master weights: "
            "set master_weights=True"
        )
    if setup.fp32_grads:
        raise ValueError(
            "DeepSpeed keeps gradients in the compute dtype (the ZeRO paper's 16 bytes per "
            "parameter): set fp32_grads=False"
        )
    if setup.tensor_parallel > 1:
        raise ValueError(
            f"tensor_parallel={setup.tensor_parallel}: this config covers data parallelism and "
            "ZeRO only; split layers with llmlab's tensor-parallel helpers or Megatron-DeepSpeed"
        )
    if not lr > 0 or not grad_clip >= 0:
        raise ValueError(f"need lr > 0 and grad_clip >= 0 (0: no clip), got {lr=}, {grad_clip=}")


def _bucket_sizes(shape: ModelShape, stage: int) -> dict[str, int]:
    """Bucket sizes (in elements) from the model's width, the rule Hugging Face's integration uses
    for "auto": DeepSpeed's defaults (5e8 elements, a 2 GB buffer in fp32) are made for billions
    of parameters and would dwarf a small model."""
    d = shape.d_model
    if stage < 3:
        return {"reduce_bucket_size": d * d, "allgather_bucket_size": d * d}
    block = count_parameters(shape).non_embedding // shape.n_layer
    return {
        "reduce_bucket_size": d * d,
        "stage3_prefetch_bucket_size": int(0.9 * d * d),
        # Keep parameters under 10 d elements (biases, norms) whole on every rank: gathering
        # them would cost more than storing them.
        "stage3_param_persistence_threshold": 10 * d,
        # At most two blocks gathered (the one computed, the next one prefetched), each
        # released after use, as FSDP's reshard_after_forward and as the planner assumes.
        # DeepSpeed's defaults (1e9 both) keep a small model gathered from forward to backward.
        "stage3_max_live_parameters": 2 * block,
        "stage3_max_reuse_distance": 0,
    }


def write_deepspeed_config(config: dict, path: str | Path) -> Path:
    """Write the config as JSON (to a temporary name, then renamed: never half a file)."""
    path = Path(path)
    write_atomically(path, (json.dumps(config, indent=2) + "\n").encode())
    return path
