"""Muon (Keller Jordan, 2024; Moonshot trained Moonlight and Kimi K2 with it): each weight matrix
of the transformer blocks steps along its gradient's momentum orthogonalised, so that every
direction of the update has about the same size, however lopsided the gradient was; the other
parameters (embeddings, the LM head, norms, biases) stay on AdamW.

`newton_schulz` is the orthogonalisation written out to be read; training runs torch.optim.Muon
(`muon_update` is its update of one gradient), paired with AdamW by `MuonWithAdamW`. torch's
iteration runs in bf16, which a CPU without bf16 instructions emulates about 100x slower: there
training runs `FP32Muon`, the same step with the iteration in fp32.
"""

import math

import torch

# The quintic's coefficients (Keller Jordan's, torch.optim.Muon's default): the steepest slope at
# 0, so small singular values grow fast, at the price of landing in a band around 1 (about
# 0.7-1.2) rather than on it.
COEFFICIENTS = (3.4445, -4.7750, 2.0315)
# How far (relative, in the Frobenius norm) an fp32 iteration may land from torch.optim.Muon's,
# which runs in bf16: 1-3 % on random matrices, where a wrong coefficient or step count lands 7 %
# or more away.
BF16_TOLERANCE = 0.04


def newton_schulz(matrix: torch.Tensor, steps: int = 5,
                  coefficients: tuple[float, float, float] = COEFFICIENTS) -> torch.Tensor:
    """`matrix` = U S V^T with every singular value pushed to about 1: about U V^T, by `steps` of
    the quintic Newton-Schulz iteration X <- a X + (b G + c G^2) X with G = X X^T.

    In fp32; torch.optim.Muon runs the same iteration in bf16 (1-3 % from this one).
    """
    a, b, c = coefficients
    x = matrix.float()
    tall = x.shape[0] > x.shape[1]
    if tall:  # iterate on the wide side, where G = X X^T is the smaller Gram matrix
        x = x.T
    # The Frobenius norm is at least the largest singular value: dividing by it puts every
    # singular value in (0, 1], where the iteration converges. (The clamp keeps 0 at 0, not 0/0.)
    x = x / x.norm().clamp(min=1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def muon_update(gradient: torch.Tensor, **options) -> torch.Tensor:
    """torch.optim.Muon's orthogonalised update of one gradient matrix, read off one step: from a
    zero weight with lr 1, no momentum (the update is the gradient's own) and no weight decay, the
    weight moves by minus the update times the "original" rate adjustment sqrt(max(1, rows/cols)).
    options: what torch.optim.Muon takes (ns_steps, ns_coefficients, ...)."""
    weight = torch.nn.Parameter(torch.zeros(gradient.shape))
    weight.grad = gradient.detach().float().clone()
    torch.optim.Muon([weight], lr=1.0, weight_decay=0.0, momentum=0.0, adjust_lr_fn="original",
                     **options).step()
    rows, cols = gradient.shape
    return -weight.detach() / math.sqrt(max(1.0, rows / cols))


def adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """torch.optim.Muon's rate for a matrix of `shape`: "original" (Keller Jordan's) scales by
    sqrt(max(1, rows / cols)); "match_rms_adamw" (Moonshot's) by 0.2 sqrt(max(rows, cols)), the
    size of an AdamW step, so AdamW's rate and weight decay carry over."""
    rows, cols = shape[:2]
    if adjust_lr_fn in (None, "original"):
        return lr * math.sqrt(max(1.0, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    raise ValueError(f"unknown adjust_lr_fn {adjust_lr_fn!r}: use 'original' or 'match_rms_adamw'")


class FP32Muon(torch.optim.Muon):
    """torch.optim.Muon with the Newton-Schulz iteration in fp32 (`newton_schulz`): for a CPU
    without bf16 instructions, where torch's bf16 iteration is emulated (one Muon step of Lab 03's
    model, instructions capped at AVX2: 7 s, against 67 ms with AVX-512 BF16). The same step as
    torch's otherwise, and the same state (one momentum buffer per matrix), so their state dicts
    load into each other."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(param.grad)
                momentum, buffer = group["momentum"], state["momentum_buffer"]
                buffer.lerp_(param.grad, 1 - momentum)
                update = param.grad.lerp(buffer, momentum) if group["nesterov"] else buffer
                update = newton_schulz(update, group["ns_steps"], group["ns_coefficients"])
                param.mul_(1 - group["lr"] * group["weight_decay"])  # decoupled, as AdamW's
                lr = adjusted_lr(group["lr"], group["adjust_lr_fn"], param.shape)
                param.add_(update.to(param.dtype), alpha=-lr)


class MuonWithAdamW:
    """torch.optim.Muon for the blocks' weight matrices and AdamW for the other parameters, used
    as one optimizer: what the Trainer, the grad scaler, checkpoints and the memory tracker ask of
    an optimizer (param_groups, step, zero_grad, state_dict, load_state_dict, state)."""

    def __init__(self, muon: torch.optim.Muon, adamw: torch.optim.AdamW):
        self.muon, self.adamw = muon, adamw

    @property
    def param_groups(self) -> list[dict]:
        """The two optimizers' own group dicts, so a learning rate written into one is theirs
        (looked up each time: load_state_dict gives an optimizer new ones)."""
        return self.muon.param_groups + self.adamw.param_groups

    @property
    def state(self) -> dict:
        """Each parameter's state (Muon's momentum, AdamW's two moments) on this rank, to read.
        (Under ZeRO-1 each is a ZeroRedundancyOptimizer, which keeps its rank's share in its
        local `.optim`.)"""
        muon, adamw = (getattr(o, "optim", o) for o in (self.muon, self.adamw))
        return {**muon.state, **adamw.state}

    def step(self) -> None:
        self.muon.step()
        self.adamw.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none)
        self.adamw.zero_grad(set_to_none)

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Under ZeRO-1: gather both optimizers' shards on rank `to` (a collective: every rank
        calls it), before that rank's state_dict()."""
        self.muon.consolidate_state_dict(to)
        self.adamw.consolidate_state_dict(to)

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])
