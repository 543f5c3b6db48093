"""Count the bytes each rank sends, by collective; or drop a kind, to see a check fail.

`count_collectives()` wraps the Python entry points of the collectives (`dist.all_reduce`,
`dist.broadcast`, FSDP2's all-gather and reduce-scatter) and records each call. What it cannot
see: DDP's built-in all-reduce, which its C++ reducer calls directly; register a Python comm hook
(`register_comm_hook(model, "allreduce")`) and DDP's traffic goes through `dist.all_reduce` too.

Each call is booked at the bytes the ring algorithm makes a rank send for it, the planner's
`ring_bytes`; what a strategy should send per step is the planner's too (llmlab.scale.comm_cost:
`ddp_bytes`, `zero1_bytes`, `fsdp_bytes`, `tensor_parallel_bytes`), so a count that disagrees
with the plan is a bug in one of them.
"""

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from llmlab.scale.comm_cost import ring_bytes

# The name under torch.distributed of each collective we wrap, and its kind.
WRAPPED = {
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
    "all_gather_into_tensor": "all_gather",
    "all_gather_single": "all_gather",  # what FSDP2 calls
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",  # what FSDP2 calls
}


@dataclass
class Call:
    kind: str
    tensor_bytes: int  # the full tensor the collective is about
    sent_bytes: float  # what this rank sends for it


@dataclass
class CommCounter:
    world_size: int
    calls: list[Call] = field(default_factory=list)

    @property
    def sent_bytes(self) -> float:
        return sum(call.sent_bytes for call in self.calls)

    def by_kind(self) -> dict[str, float]:
        """Bytes sent per kind of collective."""
        totals = defaultdict(float)
        for call in self.calls:
            totals[call.kind] += call.sent_bytes
        return dict(totals)

    def record(self, kind: str, tensor: torch.Tensor) -> None:
        nbytes = tensor.numel() * tensor.element_size()
        self.calls.append(Call(kind, nbytes, ring_bytes(kind, nbytes, self.world_size)))


def _full_tensor(name: str, args: tuple, kwargs: dict) -> torch.Tensor:
    """The tensor whose size defines the traffic: the output of an all-gather, the input of a
    reduce-scatter, the tensor itself otherwise."""
    if name.startswith("all_gather"):
        return kwargs.get("output_tensor", args[0] if args else None)
    if name.startswith("reduce_scatter"):
        return kwargs.get("input", kwargs.get("input_tensor", args[1] if len(args) > 1 else None))
    return kwargs.get("tensor", args[0] if args else None)


@contextmanager
def _patched(replacement_for) -> Iterator[None]:
    originals = {name: getattr(dist, name) for name in WRAPPED if hasattr(dist, name)}
    try:
        for name, original in originals.items():
            setattr(dist, name, replacement_for(name, original))
        yield
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)


@contextmanager
def count_collectives() -> Iterator[CommCounter]:
    """Record every wrapped collective this process calls inside the block."""
    counter = CommCounter(dist.get_world_size())

    def counting(name, original):
        def wrapper(*args, **kwargs):
            counter.record(WRAPPED[name], _full_tensor(name, args, kwargs))
            return original(*args, **kwargs)

        return wrapper

    with _patched(counting):
        yield counter


class _Done:
    """Stands in for the Work handle of a collective that was never sent."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def wait(self, *args, **kwargs) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        future = torch.futures.Future()
        future.set_result([self.tensor])  # DDP's hooks chain on the future's [tensor]
        return future


@contextmanager
def drop_collectives(*kinds: str) -> Iterator[None]:
    """Skip the named kinds of collective inside the block (to show what a check catches when a
    strategy's communication is removed): an all-reduce or broadcast leaves the tensor as it is,
    a reduce-scatter keeps this rank's own chunk unreduced."""
    droppable = ("all_reduce", "broadcast", "reduce_scatter")  # an all-gather's result is used
    if not set(kinds) <= set(droppable):
        raise ValueError(f"cannot drop {sorted(set(kinds) - set(droppable))}: use {droppable}")

    def dropping(name, original):
        if WRAPPED[name] not in kinds:
            return original

        def local_only(*args, **kwargs):
            full = _full_tensor(name, args, kwargs)
            if WRAPPED[name] == "reduce_scatter":
                output = kwargs.get("output", args[0] if args else None)
                output.copy_(full.view(dist.get_world_size(), -1)[dist.get_rank()].view_as(output))
            return _Done(full)

        return local_only

    with _patched(dropping):
        yield
