"""Fine-tuning a language model on a task: (prompt, target) pairs, a loss on the target only,
and the part of the model each method trains.

A causal language model learns a task as text: the prompt ("code, then `# Summary:`") and the
target (" the summary line") are one sequence, and the loss counts only the target's tokens. The
prompt is what the model is given, not what it should learn to write.

The methods differ only in what the optimizer may change:
- "full": every weight (and Adam keeps two more numbers per weight);
- "lora": low-rank adapters beside every matrix of the blocks (llmlab.train.lora), the rest
  frozen;
- "head": the output layer alone. A model whose output layer is tied to its token embedding
  gets its own copy first, so training the head leaves the input side as it was.
(QLoRA, LoRA on a 4-bit base, is llmlab.quant.qlora_model: the same loop trains it.)
"""

import copy
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from tqdm.auto import tqdm

from llmlab.memory import (
    MeasuredStep,
    MemoryEstimate,
    TrainingSetup,
    estimate_memory,
    measure_training_step,
    optimizer_by_name,
    prepare,
)
from llmlab.models import ModelShape, block_matrices, cross_entropy_on_ids
from llmlab.train.lora import add_lora

PARTS = ("full", "lora", "head")
IGNORE = -100  # the label cross_entropy skips: prompt and padding positions


@dataclass(frozen=True)
class TaskExample:
    ids: tuple[int, ...]  # the prompt's tokens, then the target's
    prompt_length: int


def encode_example(encode: Callable[[str], list[int]], prompt: str, target: str,
                   max_target_tokens: int = 32) -> TaskExample:
    """Prompt and target tokenized apart (so the prompt's tokens are exactly those generation
    starts from) and joined; the target cut to `max_target_tokens`."""
    prompt_ids = list(encode(prompt))
    target_ids = list(encode(target))[:max_target_tokens]
    if not prompt_ids or not target_ids:
        raise ValueError(f"an empty prompt or target cannot be trained on: {prompt[:60]!r} -> "
                         f"{target[:60]!r}")
    return TaskExample(tuple(prompt_ids + target_ids), len(prompt_ids))


Batch = tuple[torch.Tensor, torch.Tensor]  # (input ids, labels)


def task_batch(examples: Sequence[TaskExample], pad_id: int = 0) -> Batch:
    """(input ids, labels) padded on the right to the longest example; labels are IGNORE on the
    prompt and on the padding, so only the targets' tokens are scored."""
    width = max(len(example.ids) for example in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    for row, example in enumerate(examples):
        ids[row, : len(example.ids)] = torch.tensor(example.ids)
        target = slice(example.prompt_length, len(example.ids))
        labels[row, target] = ids[row, target]
    return ids, labels


def task_batches(
    examples: Sequence[TaskExample], batch_size: int, seed: int = 0, pad_id: int = 0
) -> Iterator[Batch]:
    """Endless batches: the examples shuffled (with `seed`) once per pass."""
    if not examples:
        raise ValueError("no examples to train on")
    generator = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(examples), generator=generator).tolist()
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield task_batch([examples[i] for i in order[start : start + batch_size]], pad_id)


def target_loss(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the target tokens: the logits at t predict the token at t + 1."""
    device = next(model.parameters()).device
    ids, labels = ids.to(device), labels.to(device)
    return cross_entropy_on_ids(model(input_ids=ids).logits, labels)  # IGNORE counts for nothing


def lora_targets(model: nn.Module) -> list[str]:
    """Full names of every Linear/Conv1D layer inside the transformer blocks: LoRA's targets."""
    return [name.removesuffix(".weight") for name in block_matrices(model)]


def finetune_copy(model: nn.Module, part: str, rank: int = 8, alpha: float = 16) -> nn.Module:
    """A copy of `model` (the original is left as it was) whose `part` alone is trainable."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}: use one of {PARTS} (QLoRA: "
                         "llmlab.quant.qlora_model)")
    model = copy.deepcopy(model)
    if part == "full":
        model.requires_grad_(True)
    elif part == "lora":
        add_lora(model, lora_targets(model), rank, alpha)
    else:
        model.requires_grad_(False)
        head = model.get_output_embeddings()
        if head.weight is model.get_input_embeddings().weight:  # tied: give the head its own copy
            head.weight = nn.Parameter(head.weight.detach().clone())
            model.config.tie_word_embeddings = False  # saving and reloading keep them apart
        head.weight.requires_grad_(True)
    return model


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@dataclass(frozen=True)
class FinetuneResult:
    losses: list[float]  # per step
    seconds_per_step: float  # median over the steps after the first (warm-up)


def finetune_rate(step: int, steps: int, lr: float, warmup_steps: int = 0,
                  decay_fraction: float = 0.25) -> float:
    """The learning rate at `step` (0-based) of `steps`: warmed up linearly over `warmup_steps`,
    held at `lr`, then decayed linearly toward zero over the last `decay_fraction` of the steps
    (warmup-stable-decay). The decay settles the weights where the run ends: on Lab 08's dates,
    full fine-tuning's exact match rose from about 55% to about 70% in the same 160 steps, and
    the seeds' scores drew closer together."""
    if not 0 <= step < steps:
        raise ValueError(f"step {step} is outside 0..{steps - 1}")
    if not 0 <= decay_fraction <= 1:
        raise ValueError(f"decay_fraction must be between 0 and 1, got {decay_fraction}")
    decay_steps = round(decay_fraction * steps)
    warm = (step + 1) / (warmup_steps + 1)
    settle = (steps - step) / decay_steps if decay_steps else 1.0
    return lr * min(1.0, warm, settle)


def finetune(
    model: nn.Module,
    batches: Iterator[Batch],
    steps: int,
    lr: float,
    *,
    warmup_steps: int = 0,
    decay_fraction: float = 0.25,
    progress: bool = True,
    desc: str = "fine-tune",
    clock: Callable[[], float] = time.perf_counter,
) -> FinetuneResult:
    """AdamW on the trainable parameters for `steps` batches, at the rates of `finetune_rate`
    (warm-up, constant, then a linear decay over the last quarter); `clock` times each step.

    Why not llmlab.train's Trainer: fine-tuning needs none of what it adds (schedules, clipping,
    checkpoints, ranks, MFU), and these few lines show a learner all that fine-tuning changes:
    which parameters the optimizer gets, and a loss on the target's tokens only."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:
        raise ValueError("nothing to train: every parameter of this model is frozen")
    # No weight decay: it would pull the pretrained weights (or a fresh adapter) toward zero.
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0)
    model.train()
    losses, seconds = [], []
    for step in tqdm(range(steps), desc=desc, disable=not progress, leave=False):
        start = clock()
        for group in optimizer.param_groups:
            group["lr"] = finetune_rate(step, steps, lr, warmup_steps, decay_fraction)
        loss = target_loss(model, *next(batches))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())  # .item() waits for the GPU: the step's time is complete
        seconds.append(clock() - start)
    timed = sorted(seconds[1:] or seconds)  # the first step allocates Adam's state
    return FinetuneResult(losses, timed[len(timed) // 2])


def finetune_memory(
    model: str | ModelShape, setup: TrainingSetup, part: str, device: torch.device | str = "cpu"
) -> tuple[MeasuredStep, MemoryEstimate]:
    """One training step of `setup` on `model` with only `part` trainable, measured (after a
    warm-up step), and Lab 02's plan of it: `estimate_memory` with `setup.lora_rank` for "lora",
    with `head_only` for "head", with neither for "full". QLoRA:
    llmlab.quant.qlora_memory. Random weights: memory does not depend on their values."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}: use one of {PARTS}")
    if part == "lora" and not setup.lora_rank:
        raise ValueError("measuring LoRA needs setup.lora_rank >= 1 (8 is usual)")
    # prepare() builds plain models only; finetune_copy then makes `part` alone trainable.
    plain = setup.replace(lora_rank=0, weights_4bit="", head_only=False)
    built, optimizer, input_ids, autocast_dtype = prepare(model, plain, device)
    if part != "full":
        built = finetune_copy(built, part, rank=setup.lora_rank or 8)
        trainable = [p for p in built.parameters() if p.requires_grad]
        optimizer = optimizer_by_name(trainable, setup.optimizer, setup.fused_optimizer)
    measured = measure_training_step(built, optimizer, input_ids, autocast_dtype)
    planned = {"full": plain, "lora": plain.replace(lora_rank=setup.lora_rank),
               "head": plain.replace(head_only=True)}[part]
    return measured, estimate_memory(model, planned)
