"""Tensor-parallel and 2-D (data x tensor parallel) training runs, to compare with one process.

Every run trains the smoke model for a few optimizer steps on the same GLOBAL batches, in fp32.
A correct split computes the same function with the same gradients, so its parameters after the
steps match a one-process run up to rounding (the sums are added in another order).
"""

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ParallelStyle

from llmlab.distributed.mesh import RankGrid, device_mesh
from llmlab.distributed.tensor_parallel import (
    CollectiveBytes,
    apply_tensor_parallel,
    full_parameters,
    gpt2_layout,
)
from llmlab.models import ModelShape, build_model, preset

STEPS = 5  # optimizer steps per comparison
# Plain SGD, with steps large enough to move the weights several percent: the parameters then
# differ exactly as much as the gradients did. AdamW would not do for this check: its first
# step is lr * g / |g|, so a gradient that is zero up to rounding (GPT-2's key bias gets none:
# softmax ignores a shift shared by all keys) becomes a full step in a random direction.
LR = 0.5


def smoke_shape() -> ModelShape:
    """The course's smoke model with a small vocabulary and context, so a step takes ~0.1 s."""
    return preset("tiny", vocab_size=512, context=64)


def global_batches(shape: ModelShape, steps: int, batch: int, seq: int, seed: int = 0) -> list:
    """`steps` batches of random token ids, (batch, seq) each: the same on every rank."""
    if seq > shape.context:
        raise ValueError(f"seq={seq} is longer than the model's context {shape.context}")
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, shape.vocab_size, (batch, seq), generator=generator)
            for _ in range(steps)]  # fmt: skip


def max_relative_error(params: dict, reference: dict) -> float:
    """max over parameters of ||p - p_ref|| / ||p_ref||: 0 for the same weights."""
    if params.keys() != reference.keys():
        raise ValueError(f"different parameters: {sorted(params.keys() ^ reference.keys())}")
    return max(((params[n] - ref).norm() / ref.norm()).item() for n, ref in reference.items())


def _train(model: nn.Module, batches: list, on_gradients=None, comm=None) -> list[float]:
    """SGD steps on `batches`; `on_gradients(model)` runs between backward and the step, and
    the first forward and backward pass run inside the `comm` counter when one is given."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step, input_ids in enumerate(batches):
        with comm if comm is not None and step == 0 else contextlib.nullcontext():
            loss = model(input_ids=input_ids, labels=input_ids).loss  # mean over local tokens
            loss.backward()
        if on_gradients:
            on_gradients(model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def train_single_process(
    shape: ModelShape | None = None, steps: int = STEPS, batch: int = 8, seq: int = 32
) -> dict[str, torch.Tensor]:
    """The reference: one process, the whole batch, the model as `build_model` makes it."""
    shape = shape or smoke_shape()
    model = build_model(shape)
    _train(model, global_batches(shape, steps, batch, seq))
    return full_parameters(model)


@dataclass
class ParallelRun:
    """What one rank of a parallel run gives back."""

    params: dict[str, torch.Tensor]  # every parameter, whole, in the unsplit model's layout
    losses: list[float]  # this rank's loss per step
    comm_counts: dict[str, int]  # collectives in the first forward and backward pass, by op
    comm_bytes: dict[str, int]  # bytes handed to those collectives, by op


def train_tensor_parallel(
    shape: ModelShape | None = None,
    steps: int = STEPS,
    batch: int = 8,
    seq: int = 32,
    tp: int = 2,
    plan: dict[str, ParallelStyle] | None = None,
    average_gradients: bool = True,
) -> ParallelRun:
    """Train with tensor parallelism of degree `tp`, and data parallelism over the remaining
    world_size / tp ranks (2-D when that is > 1). Call on every rank (inside `launch`).

    One `RankGrid` gives both groups: the mesh's "tp" dimension splits the model, the "dp"
    dimension splits the batch, and each data-parallel group averages its gradients.
    `average_gradients=False` skips that average (to see the comparison catch it).
    """
    shape = shape or smoke_shape()
    grid = RankGrid.for_world(dist.get_world_size(), tp=tp)
    if batch % grid.dp:
        raise ValueError(f"a global batch of {batch} does not split over {grid.dp} data-parallel "
                         "ranks: make it a multiple of world_size / tp")  # fmt: skip
    mesh = device_mesh(dp=grid.dp, tp=grid.tp)
    model = apply_tensor_parallel(build_model(shape), mesh["tp"], plan)
    per_rank = batch // grid.dp
    at = grid.coords(dist.get_rank())["dp"]
    batches = [b[at * per_rank:(at + 1) * per_rank]
               for b in global_batches(shape, steps, batch, seq)]  # fmt: skip

    dp_group = mesh["dp"].get_group()

    def average(model):
        for param in model.parameters():
            grad = param.grad.to_local() if isinstance(param.grad, DTensor) else param.grad
            dist.all_reduce(grad, group=dp_group)  # the DDP step, on the data-parallel axis
            grad /= grid.dp

    on_gradients = average if grid.dp > 1 and average_gradients else None
    comm = CollectiveBytes()  # counts the first step's tensor-parallel collectives
    losses = _train(model, batches, on_gradients, comm)
    counts = {str(op).rsplit(".", 1)[-1]: n for op, n in comm.get_comm_counts().items()}
    return ParallelRun(gpt2_layout(full_parameters(model)), losses, counts, dict(comm.bytes))
