"""Turn a CUDA out-of-memory error into concrete options, each estimated by the planner.

    with oom_advice("llama-7b", setup):
        train()

If training runs out of GPU memory, the error that comes out lists what to change, the options
that fit first, then by how much memory they need.
"""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from llmlab.memory.estimate import (
    GB,
    MemoryEstimate,
    TrainingSetup,
    estimate_memory,
    model_setup_problem,
)
from llmlab.models import ModelShape, as_shape


@dataclass(frozen=True)
class Option:
    change: str  # what to do, in words
    cost: str  # what it costs
    estimate: MemoryEstimate

    def fits(self, gpu_bytes: float) -> bool:
        """Whether the estimate, CUDA context included, is within `gpu_bytes`."""
        return self.estimate.total <= gpu_bytes


def _smaller_micro_batch(setup: TrainingSetup, fits) -> TrainingSetup | None:
    """Halve the micro-batch (doubling accumulation: the same sequences per optimizer step)
    until it fits, or down to 1."""
    if setup.batch == 1:
        return None
    new = setup
    while new.batch > 1:
        new = new.replace(batch=new.batch // 2, grad_accumulation=new.grad_accumulation * 2)
        if fits(new):
            break
    return new


# (change, what it costs, how it changes a setup: a new setup, or None where it does not apply),
# least invasive first.
LEVERS = (
    ("fused AdamW, torch.optim.AdamW(fused=True)", "none: one kernel, no scratch buffer",
     lambda s, fits: s.replace(fused_optimizer=True)
     if s.optimizer in ("adam", "adamw") and not s.fused_optimizer else None),
    ("bf16 mixed precision", "none on Ampere or newer (it is faster); fp16 needs a grad scaler",
     lambda s, fits: s.replace(dtype="bf16") if s.dtype == "fp32" else None),
    ("smaller micro-batch", "same result; smaller matmuls run slower",
     _smaller_micro_batch),
    ("activation checkpointing", "about a third more compute: the forward pass runs twice",
     lambda s, fits: None if s.checkpointing else s.replace(checkpointing=True)),
    ("8-bit Adam", "needs bitsandbytes; usually the same loss",
     lambda s, fits: s.replace(optimizer="adam-8bit") if s.optimizer in ("adam", "adamw")
     else None),
    ("ZeRO stage 3 / FSDP full sharding", "more communication between the GPUs",
     lambda s, fits: s.replace(zero=3) if s.weight_replicas > 1 and s.zero < 3 else None),
    # (Muon trains whole matrices: no adapters for it.)
    ("LoRA, rank 16", "trains adapters only: fine-tuning, not pre-training",
     lambda s, fits: None if s.lora_rank or s.optimizer == "muon" else s.replace(lora_rank=16)),
    ("QLoRA: NF4 base weights", "fine-tuning only; 4-bit weights cost a little accuracy",
     lambda s, fits: None if s.weights_4bit or s.optimizer == "muon"
     else s.replace(lora_rank=s.lora_rank or 16, weights_4bit="nf4")),
)


def _apply(shape: ModelShape, setup: TrainingSetup, levers, fits
           ) -> tuple[TrainingSetup, list[str], list[str]]:
    """Apply each lever that applies, in order: the new setup, what changed and the costs. A
    lever the model cannot take (LoRA on a mixture of experts) does not apply."""
    changes, costs = [], []
    for change, cost, lever in levers:
        new = lever(setup, fits)
        if new is None or model_setup_problem(shape, new):
            continue
        if new.batch != setup.batch:
            change = f"micro-batch {new.batch} x {new.grad_accumulation} accumulation steps"
        setup = new
        changes.append(change)
        costs.append(cost)
    return setup, changes, costs


def memory_options(
    model: str | ModelShape, setup: TrainingSetup, gpu_bytes: float
) -> list[Option]:
    """Each single change to `setup`, and the least invasive combination that fits, estimated.

    Ranked: options that fit in `gpu_bytes` first (least invasive first), then the others by the
    memory they need.
    """
    shape = as_shape(model)

    def fits(new: TrainingSetup) -> bool:
        return estimate_memory(shape, new).total <= gpu_bytes

    def option(levers) -> tuple[int, Option] | None:
        """The option, and how invasive it is: its most invasive lever."""
        new, changes, costs = _apply(shape, setup, levers, fits)
        if not changes:
            return None
        invasive = max(LEVERS.index(lever) for lever in levers)
        return invasive, Option(" + ".join(changes), " + ".join(costs), estimate_memory(shape, new))

    options = [option([lever]) for lever in LEVERS]
    chosen = []  # add levers, least invasive first, until the set-up fits ...
    for lever in LEVERS:
        if fits(_apply(shape, setup, chosen, fits)[0]):
            break
        chosen.append(lever)
    for lever in reversed(chosen):  # ... then drop the most invasive ones it fits without
        fewer = [other for other in chosen if other is not lever]
        if fits(_apply(shape, setup, fewer, fits)[0]):
            chosen = fewer
    if len(chosen) > 1 and fits(_apply(shape, setup, chosen, fits)[0]):
        options.append(option(chosen))
    ranked = sorted((o for o in options if o is not None), key=lambda pair: pair[0])
    fitting = [o for _, o in ranked if o.fits(gpu_bytes)]
    rest = sorted((o for _, o in ranked if not o.fits(gpu_bytes)), key=lambda o: o.estimate.total)
    return fitting + rest


def format_options(options: list[Option], gpu_bytes: float) -> str:
    """The options as numbered lines: change, estimated GB, fits or not, and the cost."""
    lines = [f"Options for a GPU with {gpu_bytes / GB:.1f} GB (estimated by llmlab.memory):"]
    for number, option in enumerate(options, start=1):
        verdict = "fits" if option.fits(gpu_bytes) else "too big"
        lines.append(f"  {number}. {option.change}: {option.estimate.total / GB:.1f} GB, "
                     f"{verdict}. Cost: {option.cost}.")
    if not any(option.fits(gpu_bytes) for option in options):
        lines.append("  None of these fits: add GPUs (ZeRO-3/FSDP shards the model states over "
                     "them) or tensor parallelism, or pick a smaller model.")
    return "\n".join(lines)


class OutOfMemoryWithAdvice(torch.cuda.OutOfMemoryError):
    """A CUDA out-of-memory error whose message also lists what to change."""


@contextlib.contextmanager
def oom_advice(
    model: str | ModelShape, setup: TrainingSetup, gpu_gb: float | None = None
) -> Iterator[None]:
    """Re-raise a CUDA out-of-memory error inside the block with ranked options added.

    `gpu_gb` is the GPU's memory in GB; by default the current CUDA device's.
    """
    try:
        yield
    except torch.cuda.OutOfMemoryError as error:
        if gpu_gb is None:
            gpu_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        else:
            gpu_bytes = gpu_gb * GB
        estimate = estimate_memory(model, setup)
        advice = format_options(memory_options(model, setup, gpu_bytes), gpu_bytes)
        raise OutOfMemoryWithAdvice(
            f"{error}\n\nThe planner estimates {estimate.total / GB:.1f} GB per GPU for this "
            f"set-up (peak at the {estimate.peak_phase}).\n{advice}"
        ) from error
