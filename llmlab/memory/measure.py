"""Measure the memory of a real training step: every tensor allocation, by what it is for.

`MemoryTracker` sees every op PyTorch runs (a TorchDispatchMode) and counts the bytes of each new
tensor storage until Python frees it, so it works the same on a CPU, a GPU, and on fake tensors
that have shapes but no memory (the dry run of a model too big for this machine). PyTorch has a
fuller tool of this kind, `torch.distributed._tools.mem_tracker.MemTracker`: it agrees with this
one (a test checks it) but is private API, and about ten times slower on a 7B fake model.
Memory a kernel uses without making a tensor (cuBLAS's workspace) is invisible to both; on a GPU
`torch.cuda.max_memory_allocated`, the allocator's own count, sees it.
"""

import gc
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from llmlab.device import autocast

CATEGORIES = ("weights", "gradients", "optimizer states", "activations", "temporaries")
# What a new storage is, by the phase of the step that allocates it (gradients and optimizer
# states are recognised separately, see MemoryTracker).
PHASE_CATEGORY = {"forward": "activations", "backward": "temporaries", "optimizer": "temporaries"}


class MemoryTracker(TorchDispatchMode):
    """Bytes of live tensor storages by category, and the peak with its breakdown.

    Weights and existing optimizer states are registered on entry. A new storage is an
    activation when the forward pass makes it and a temporary otherwise, until it becomes a
    parameter's `.grad` (then it is a gradient) or part of the optimizer's state (then it is an
    optimizer state). Views share their base's storage and are counted once.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None):
        super().__init__()
        self.model, self.optimizer = model, optimizer
        self.phase = "forward"
        self.current = dict.fromkeys(CATEGORIES, 0)
        self.peak = dict(self.current)
        self.peak_phase = ""
        self.before: dict[str, dict[str, int]] = {}  # phase -> bytes by category when it began
        self._live: dict[int, tuple[str, int]] = {}  # id(storage) -> (category, bytes)
        self._refs: dict[int, weakref.ref] = {}
        self._hooks: list = []

    @property
    def total(self) -> int:
        return sum(self.current.values())

    def __enter__(self) -> "MemoryTracker":
        self._add_all(self.model.parameters(), "weights")
        self._add_all(self.model.buffers(), "weights")
        self._add_all(self._optimizer_tensors(), "optimizer states")
        for parameter in self.model.parameters():
            if parameter.requires_grad:
                hook = parameter.register_post_accumulate_grad_hook(self._on_gradient)
                self._hooks.append(hook)
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()
        super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outputs, _ = tree_flatten(out)
        tensors = (t for t in outputs if isinstance(t, torch.Tensor))
        self._add_all(tensors, PHASE_CATEGORY[self.phase])
        return out

    def start(self, phase: str) -> None:
        """Name the phase the next ops belong to: "forward", "backward" or "optimizer"."""
        if phase not in PHASE_CATEGORY:
            raise ValueError(f"unknown phase {phase!r}: use one of {tuple(PHASE_CATEGORY)}")
        if self.phase == "optimizer":  # the optimizer may have created its state (first step)
            self._relabel(self._optimizer_tensors(), "optimizer states")
        if phase == "optimizer":  # FSDP sets its sharded .grad directly, with no hook to tell
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            self._relabel(grads, "gradients")
        self.phase = phase
        self.before[phase] = dict(self.current)

    def _optimizer_tensors(self) -> Iterable[torch.Tensor]:
        if self.optimizer is None:
            return []
        # ZeroRedundancyOptimizer keeps this rank's share of the states in its local `.optim`.
        states = getattr(self.optimizer, "optim", self.optimizer).state.values()
        return [t for state in states for t in state.values() if isinstance(t, torch.Tensor)]

    def _on_gradient(self, parameter: nn.Parameter) -> None:
        self._relabel([parameter.grad], "gradients")

    def _add_all(self, tensors: Iterable[torch.Tensor], category: str) -> None:
        for tensor in tensors:
            if tensor.device.type == "meta":  # a shape without memory (DeepSpeed keeps some)
                continue
            storage = _local(tensor).untyped_storage()
            key = id(storage)
            if key in self._live:
                continue
            self._live[key] = (category, storage.nbytes())
            # Called when Python frees the storage: that is when its memory is given back.
            self._refs[key] = weakref.ref(storage, lambda _, key=key: self._free(key))
            self.current[category] += storage.nbytes()
        if self.total > sum(self.peak.values()):
            self.peak, self.peak_phase = dict(self.current), self.phase

    def _relabel(self, tensors: Iterable[torch.Tensor], category: str) -> None:
        for tensor in tensors:
            key = id(_local(tensor).untyped_storage())
            if key in self._live:
                old, nbytes = self._live[key]
                self.current[old] -= nbytes
                self.current[category] += nbytes
                self._live[key] = (category, nbytes)

    def _free(self, key: int) -> None:
        category, nbytes = self._live.pop(key)
        self._refs.pop(key)
        self.current[category] -= nbytes


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's part of a tensor: an FSDP2 shard (a DTensor) holds only its local piece."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


@dataclass(frozen=True)
class MeasuredStep:
    """Bytes of one training step: after the forward pass, after backward, and at the peak."""

    after_forward: dict[str, int]
    after_backward: dict[str, int]
    peak: dict[str, int]
    peak_phase: str  # the phase of the step the peak happened in
    cuda_max_allocated: int | None = None  # the CUDA allocator's own peak, on a GPU

    @property
    def peak_bytes(self) -> int:
        return sum(self.peak.values())

    @property
    def weights(self) -> int:
        return self.after_forward["weights"]

    @property
    def gradients(self) -> int:
        return self.after_backward["gradients"]

    @property
    def optimizer_states(self) -> int:
        return self.after_forward["optimizer states"]

    @property
    def activations(self) -> int:
        """What the forward pass left alive for the backward pass (the loss included)."""
        return self.after_forward["activations"]


def training_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    input_ids: torch.Tensor,
    autocast_dtype: torch.dtype = torch.float32,
    tracker: MemoryTracker | None = None,
) -> torch.Tensor:
    """One step: forward (under autocast when `autocast_dtype` is 16-bit), backward, optimizer
    step, gradients freed (set to None). Returns the loss."""
    start = tracker.start if tracker else lambda phase: None
    start("forward")
    with autocast(input_ids.device, autocast_dtype):
        loss = model(input_ids=input_ids, labels=input_ids).loss
    start("backward")
    loss.backward()
    start("optimizer")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # gradients take no memory between steps
    start("forward")  # the step is over (and the optimizer's new state, if any, is filed)
    return loss.detach()  # not .item(): fake tensors (the dry run) have no value to read


def measure_training_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    input_ids: torch.Tensor,
    autocast_dtype: torch.dtype = torch.float32,
) -> MeasuredStep:
    """Run one warm-up step (it creates the optimizer's state), then measure the next step."""
    training_step(model, optimizer, input_ids, autocast_dtype)
    on_cuda = input_ids.device.type == "cuda"
    if on_cuda:
        # Models measured before this one live on until the garbage collector frees their
        # reference cycles: on an H200 each left 1.5 GB in the allocator's peak (GPT-2 small).
        gc.collect()
        torch.cuda.synchronize(input_ids.device)
        torch.cuda.reset_peak_memory_stats(input_ids.device)
    with MemoryTracker(model, optimizer) as tracker:
        training_step(model, optimizer, input_ids, autocast_dtype, tracker)
    cuda_peak = torch.cuda.max_memory_allocated(input_ids.device) if on_cuda else None
    return MeasuredStep(tracker.before["backward"], tracker.before["optimizer"], tracker.peak,
                        tracker.peak_phase, cuda_peak)
