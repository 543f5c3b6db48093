"""Pipeline parallelism: each rank holds some consecutive blocks (a stage) and passes activations
on; the batch is cut into micro-batches so the stages can work at the same time.

`torch.distributed.pipelining` runs the schedules (`ScheduleGPipe`: all forwards, then all
backwards; `Schedule1F1B`: one forward, one backward in turn once the pipe is full;
`ScheduleInterleaved1F1B`: the same with several chunks of layers per rank, the model cut into
ranks x chunks stages and chunk c of rank r the stage c x ranks + r;
`ScheduleInterleavedZeroBubble`: interleaved, with each backward split into the input's gradient
and the weights', the latter run where the pipe would idle, as llmlab.scale.schedules' ZB-H1).
Its
`PipelineStage` passes one tensor from stage to stage, and a transformers model's forward takes
keywords and returns a ModelOutput, so each stage here is a small nn.Module that takes a tensor
and returns a tensor: token ids -> hidden states -> ... -> logits.

GPT-2 ties its LM head to its token embedding: the first stage uses the matrix to embed, the last
to predict. Each holds its own copy, so after the backward pass the two copies' gradients are
summed (an all-reduce between those two ranks) and both take the same step.
"""

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
)

from llmlab.distributed.harness.equivalence import SMOKE_SHAPE, reference_optimizer
from llmlab.distributed.harness.model_parallel import STEPS, token_batches
from llmlab.models import ModelShape, build_model, next_token_cross_entropy, preset
from llmlab.models.blocks import transformer_blocks
from llmlab.scale.comm_cost import bubble_fraction

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B,
             "interleaved-1f1b": ScheduleInterleaved1F1B,
             "interleaved-zero-bubble": ScheduleInterleavedZeroBubble}
# The schedules that take several stages per rank.
INTERLEAVED = ("interleaved-1f1b", "interleaved-zero-bubble")


def fewest_microbatches(schedule: str, ranks: int) -> int:
    """The fewest micro-batches torch runs `schedule` with on `ranks` ranks: one for GPipe (its
    stages only wait longer), as many as the ranks for the others (a guard against a 1F1B
    hang). Torch 2.10 guards GPipe too; 2.11 on does not (pytorch/pytorch#171462)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: use one of {tuple(SCHEDULES)}")
    return 1 if schedule == "gpipe" and torch.__version__ >= "2.11" else ranks


class GPT2Stage(nn.Module):
    """Blocks [first, last) of a GPT-2 model; the first stage also embeds the tokens, the last
    also applies the final norm and the LM head. Tensor in, tensor out."""

    def __init__(self, model: nn.Module, first: int, last: int):
        super().__init__()
        if getattr(model.config, "model_type", "") != "gpt2":
            raise ValueError("pipeline stages are written for the gpt2 family (the smoke model)")
        blocks = transformer_blocks(model)
        self.is_first, self.is_last = first == 0, last == len(blocks)
        self.blocks = nn.ModuleList(blocks[first:last])
        if self.is_first:
            self.wte, self.wpe = model.transformer.wte, model.transformer.wpe
        if self.is_last:
            self.ln_f, self.lm_head = model.transformer.ln_f, model.lm_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.is_first:  # x: token ids (batch, seq)
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            x = block(x)  # no mask: GPT-2's attention is causal on its own
        return self.lm_head(self.ln_f(x)) if self.is_last else x


def stage_bounds(n_layer: int, stages: int) -> list[tuple[int, int]]:
    """[first, last) blocks of each stage: as equal as they can be, earlier stages get the extra."""
    if not 1 <= stages <= n_layer:
        raise ValueError(f"{stages} stages for {n_layer} blocks: each stage needs at least one")
    size, extra = divmod(n_layer, stages)
    bounds, first = [], 0
    for stage in range(stages):
        last = first + size + (stage < extra)
        bounds.append((first, last))
        first = last
    return bounds


@dataclass
class PipelineRun:
    """What one stage (rank) of a pipeline run gives back."""

    stage: int
    params: dict[str, torch.Tensor]  # this stage's parameters, named as in the whole model
    losses: list[float]  # the mean loss per step (last stage; empty elsewhere)
    step_times: list[float]  # each step's wall time, on this stage's clock
    busy_times: list[float]  # each step's time spent computing forward and backward chunks

    @property
    def step_seconds(self) -> float:
        return statistics.median(self.step_times)

    @property
    def idle_fraction(self) -> float:
        return 1 - statistics.median(self.busy_times) / self.step_seconds


def train_pipeline(
    shape: ModelShape | None = None,
    steps: int = STEPS,
    batch: int = 8,
    seq: int = 32,
    microbatches: int = 4,
    schedule: str = "gpipe",
    sync_tied: bool = True,
    optimizer: str = "sgd-momentum",
    chunks: int = 1,
) -> PipelineRun:
    """Train with a pipeline over the ranks (call on every rank, inside `launch`), on
    `equivalence`'s batches and optimizer: one stage per rank, or `chunks` per rank with an
    interleaved schedule. `sync_tied=False` skips the tied embedding's gradient all-reduce (to
    see the comparison catch it)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: use one of {tuple(SCHEDULES)}")
    if (schedule in INTERLEAVED) != (chunks > 1):
        raise ValueError(f"{schedule} with {chunks} chunk(s) per rank: the interleaved schedules "
                         f"{INTERLEAVED} take 2 or more, the others 1")
    shape = shape or SMOKE_SHAPE
    if batch % microbatches:
        raise ValueError(f"a batch of {batch} does not cut into {microbatches} equal "
                         "micro-batches")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    if microbatches < fewest_microbatches(schedule, ranks):
        raise ValueError(f"{schedule} on torch {torch.__version__} needs at least as many "
                         f"micro-batches as ranks ({ranks}): got {microbatches}")
    model = build_model(shape)  # every rank builds it whole (same seed), then keeps its stages
    bounds = stage_bounds(shape.n_layer, ranks * chunks)
    # Chunk c of this rank is stage c x ranks + rank: the layers go round the ranks `chunks` times.
    modules = [GPT2Stage(model, *bounds[chunk * ranks + rank]) for chunk in range(chunks)]
    names = {id(p): name for name, p in model.named_parameters()}
    stages = [PipelineStage(module, chunk * ranks + rank, ranks * chunks, torch.device("cpu"))
              for chunk, module in enumerate(modules)]
    busy = [0.0]
    for stage in stages:
        _time_chunks(stage, busy)
    # The schedule cuts the batch into micro-batches and divides the summed gradients by their
    # number, so with a mean loss per micro-batch the gradient is the global batch's mean.
    runner = SCHEDULES[schedule](stages if schedule in INTERLEAVED else stages[0], microbatches,
                                 loss_fn=next_token_cross_entropy)
    parameters = [p for module in modules for p in module.parameters()]
    optimizer = reference_optimizer(parameters, optimizer)
    first, last = modules[0], modules[-1]  # the embedding is on rank 0, the head on the last
    tied = shape.tied_embeddings and ranks > 1 and (first.is_first or last.is_last)
    tie_group = dist.new_group([0, ranks - 1])  # every rank must take part in creating it
    losses, step_times, busy_times = [], [], []
    for tokens in token_batches(shape, steps, batch, seq):
        # Contiguous: the stages check each micro-batch's strides against the first one's, and
        # torch 2.10's check counts a slice's stride (33, 1) as a mismatch with (32, 1).
        inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        dist.barrier()  # start the clocks together
        busy[0], start = 0.0, time.perf_counter()
        step_losses = []
        if first.is_first:
            runner.step(inputs, target=targets if last.is_last else None)
        else:
            runner.step(target=targets, losses=step_losses)
        step_times.append(time.perf_counter() - start)
        busy_times.append(busy[0])
        if tied and sync_tied:
            weight = first.wte.weight if first.is_first else last.lm_head.weight
            dist.all_reduce(weight.grad, group=tie_group)  # embedding + LM-head gradient
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step_losses:
            losses.append(torch.stack(step_losses).mean().item())
    params = {names[id(p)]: p.detach().clone() for p in parameters}
    return PipelineRun(rank, params, losses, step_times, busy_times)


def _time_chunks(stage: PipelineStage, busy: list[float]) -> None:
    """Add the seconds the stage spends in its forward and backward chunks to `busy[0]`;
    everything else in a step (waiting for a neighbour's activations or gradients) is idle."""
    for name in ("forward_one_chunk", "backward_one_chunk"):
        work = getattr(stage, name)

        def timed(*args, _work=work, **kwargs):
            start = time.perf_counter()
            try:
                return _work(*args, **kwargs)
            finally:
                busy[0] += time.perf_counter() - start

        setattr(stage, name, timed)  # the schedule calls these by attribute


# The bubble sweep's model: the smoke shape with room for 128-token sequences, so that one
# micro-batch's forward and backward on a stage take tens of milliseconds even on a CPU, and
# the cost of passing a message between stages (a fixed overhead per micro-batch) stays small
# beside them, as the bubble formula assumes.
BUBBLE_SHAPE = preset("tiny", vocab_size=512, context=128)


def bubble_sweep(
    microbatch_counts=(1, 2, 4, 8), schedule: str = "gpipe", micro_batch: int = 4,
    seq: int = 128, steps: int = 7, shape: ModelShape | None = None,
) -> list[dict]:
    """Measured idle share per stage against `bubble_fraction`, for each micro-batch count.
    Call on every rank; every rank returns the same table.

    Each micro-batch keeps `micro_batch` sequences whatever their number m (the step's batch is
    m x micro_batch): the formula counts slots of equal length, and cutting a fixed batch into
    ever smaller pieces would measure per-message overheads instead of the bubble.
    """
    rows = []
    for m in microbatch_counts:
        run = train_pipeline(shape or BUBBLE_SHAPE, steps, m * micro_batch, seq, m, schedule)
        stages = [None] * dist.get_world_size()
        dist.all_gather_object(stages, (run.busy_times, run.step_times))
        # A stage's own clock stops at its last chunk: the last stage never waits for the first
        # one's final backward (the drain). The step, as the formula counts it, ends when the
        # whole pipe is done: the slowest stage's clock.
        pipe = [max(times[k] for _, times in stages) for k in range(steps)]
        # The median over steps: on shared cores, other work stretches some steps at random.
        idle = [statistics.median(1 - b / t for b, t in zip(busy, pipe, strict=True))
                for busy, _ in stages]
        rows.append({"microbatches": m, "schedule": schedule, "idle": idle,
                     "formula": bubble_fraction(dist.get_world_size(), m)})
    return rows
