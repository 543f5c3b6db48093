"""Tensor-parallel and 2-D (data x tensor parallel) training runs, to compare with one process.

The runs use `equivalence`'s harness: the same smoke model, the same GLOBAL batches and the same
optimizer as its one-process reference (`reference_parameters`). A correct split computes the
same function with the same gradients, so its parameters after the steps match the reference up
to rounding (sums are added in another order): `parameters_error` says by how much.
"""

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ParallelStyle

from llmlab.distributed.data_parallel import full_parameters
from llmlab.distributed.harness.equivalence import (
    SMOKE_SHAPE,
    global_batches,
    loss_on,
    reference_optimizer,
    reference_parameters,
)
from llmlab.distributed.mesh import RankGrid, device_mesh
from llmlab.distributed.tensor_parallel import (
    CollectiveBytes,
    apply_tensor_parallel,
    check_sequence_split,
    gpt2_layout,
)
from llmlab.models import ModelShape, build_model

STEPS = 5  # optimizer steps per comparison: enough for momentum to matter


def token_batches(shape: ModelShape, steps: int, batch: int, seq: int) -> torch.Tensor:
    """`equivalence.global_batches` cut to `seq` tokens of input (plus the next token to
    predict): (steps, batch, seq + 1)."""
    if seq > shape.context:
        raise ValueError(f"seq={seq} is longer than the model's context {shape.context}")
    return global_batches(steps, batch, shape)[:, :, :seq + 1]


def train_single_process(
    shape: ModelShape | None = None, steps: int = STEPS, batch: int = 8, seq: int = 32
) -> dict[str, torch.Tensor]:
    """The reference: every parameter after `steps` steps in one process on the whole batch."""
    shape = shape or SMOKE_SHAPE
    return reference_parameters(token_batches(shape, steps, batch, seq), shape, "sgd-momentum")[0]


def _train(model: nn.Module, batches, optimizer: str, on_gradients=None, comm=None) -> list:
    """A step on each batch of token rows; `on_gradients(model)` runs between backward and the
    step, and the first forward and backward pass run inside the `comm` counter if given."""
    optimizer = reference_optimizer(model.parameters(), optimizer)
    losses = []
    for step, tokens in enumerate(batches):
        with comm if comm is not None and step == 0 else contextlib.nullcontext():
            loss = loss_on(model, tokens)  # the mean over this rank's rows
            loss.backward()
        if on_gradients:
            on_gradients(model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


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
    optimizer: str = "sgd-momentum",
    sequence_parallel: bool = False,
) -> ParallelRun:
    """Train with tensor parallelism of degree `tp`, and data parallelism over the remaining
    world_size / tp ranks (2-D when that is > 1). Call on every rank (inside `launch`).

    One `RankGrid` gives both groups: the mesh's "tp" dimension splits the model, the "dp"
    dimension splits the batch, and each data-parallel group averages its gradients.
    `average_gradients=False` skips that average (to see the comparison catch it).
    """
    shape = shape or SMOKE_SHAPE
    if sequence_parallel:
        check_sequence_split(seq, tp)  # before any collective, on every rank alike
    grid = RankGrid.for_world(dist.get_world_size(), tp=tp)
    dp = grid.parallel.dp
    if batch % dp:
        raise ValueError(f"a global batch of {batch} does not split over {dp} "
                         "data-parallel ranks: make it a multiple of world_size / tp")
    mesh = device_mesh(grid.parallel)
    model = apply_tensor_parallel(build_model(shape), mesh["tp"], plan, sequence_parallel)
    rows = batch // dp
    at = grid.coords(dist.get_rank())["dp"]
    batches = token_batches(shape, steps, batch, seq)[:, at * rows:(at + 1) * rows]
    dp_group = mesh["dp"].get_group()

    def average(model):
        for param in model.parameters():
            grad = param.grad.to_local() if isinstance(param.grad, DTensor) else param.grad
            dist.all_reduce(grad, group=dp_group)  # the DDP step, on the data-parallel axis
            grad /= dp

    on_gradients = average if dp > 1 and average_gradients else None
    comm = CollectiveBytes()  # counts the first step's tensor-parallel collectives
    losses = _train(model, batches, optimizer, on_gradients, comm)
    counts = {str(op).rsplit(".", 1)[-1]: n for op, n in comm.get_comm_counts().items()}
    return ParallelRun(gpt2_layout(full_parameters(model)), losses, counts, dict(comm.bytes))
