"""A mixture-of-experts (MoE) layer: many MLPs ("experts"), and a router that sends each token to
a few of them, so the parameters grow with the number of experts while each token's compute does
not.

The router is a linear layer: one score (logit) per expert for each token. Each token goes to the
`top_k` experts with the highest scores, and the layer adds their outputs, weighted. References
differ in how the weights are made, so both choices are options here:
- `softmax="before_top_k"` (Mixtral, Qwen2-MoE): probabilities over all experts, then the top k;
  `renormalize=True` rescales the k weights to sum to 1 (Mixtral always; Qwen2-MoE's
  `norm_topk_prob`). Without it the weights sum to less than 1.
- `softmax="after_top_k"`: the top k logits, then a softmax over those k. It gives the same
  weights as before_top_k with renormalisation (the other experts' exp terms cancel).

An expert takes at most `capacity` tokens per batch, `capacity_factor` times its even share of
the batch's top_k x tokens choices (Switch Transformer, GShard); `capacity_factor=None` sets no
limit. The rule for who gets a seat, first come first served: every token's first choice, in token
order, then every token's second choice, and so on (GShard's priority: a token's first choice
before anyone's second). A choice that finds its expert full is dropped: that expert does not see
the token, and its weight goes nowhere. A token with every choice dropped leaves the layer as it
came in: the layer's output is its input plus the experts' weighted outputs (the residual).

Two ways to keep the experts evenly loaded:
- `load_balancing_loss` (Switch Transformer): an auxiliary loss added to the training loss;
- the auxiliary-loss-free bias (DeepSeek-V3): a per-expert `balance_bias` added to the scores
  that choose the top k (never to the weights), nudged by `bias_rate` after each step by
  `update_balance_bias`: up for an expert that took fewer tokens than the average, down for one
  that took more.

`with_experts` puts an MoE layer in every block's MLP place of a built model (`MoEFeedForward`:
the block adds the residual, and the balancing loss reaches the training loss through any loop by
`AddToLoss`), so an MoE model trains with the course's loops (Lab 11).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from llmlab.models.blocks import transformer_blocks

SOFTMAX_ORDERS = ("before_top_k", "after_top_k")


class Expert(nn.Module):
    """One expert: a SwiGLU MLP, `down(silu(gate(x)) * up(x))`, as in Mixtral and Qwen2-MoE."""

    def __init__(self, hidden: int, ff: int):
        super().__init__()
        self.gate = nn.Linear(hidden, ff, bias=False)
        self.up = nn.Linear(hidden, ff, bias=False)
        self.down = nn.Linear(ff, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


@dataclass
class Routing:
    """Where a batch of T tokens goes, for E experts and k choices per token."""

    logits: torch.Tensor  # (T, E) the router's scores
    probs: torch.Tensor  # (T, E) softmax over all experts: what the balancing loss reads
    experts: torch.Tensor  # (T, k) the chosen experts, best first
    weights: torch.Tensor  # (T, k) each choice's weight on its expert's output
    kept: torch.Tensor  # (T, k) bool: False where the expert was full and the choice dropped


def route(
    logits: torch.Tensor,
    top_k: int,
    softmax: str = "before_top_k",
    renormalize: bool = True,
    balance_bias: torch.Tensor | None = None,
    capacity: int | None = None,
    weight_scale: float = 1.0,
) -> Routing:
    """Choose each token's experts and weights from the router's `logits` (T, E); the weights
    are multiplied by `weight_scale` (DeepSeek's routed scaling factor: with top 1 of E and no
    renormalisation a weight starts near 1/E, and E brings the output back to a dense MLP's
    scale)."""
    if softmax not in SOFTMAX_ORDERS:
        raise ValueError(f"softmax must be one of {SOFTMAX_ORDERS}, got {softmax!r}")
    probs = logits.softmax(dim=-1)
    scores = probs if softmax == "before_top_k" else logits
    # The bias only changes which experts are chosen; the weights come from the unbiased scores.
    choosing = scores if balance_bias is None else scores + balance_bias
    experts = choosing.topk(top_k, dim=-1).indices
    weights = scores.gather(-1, experts)
    if softmax == "after_top_k":
        weights = weights.softmax(dim=-1)
    elif renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights * weight_scale
    kept = torch.ones_like(experts, dtype=torch.bool)
    if capacity is not None:
        kept = seat_order(experts, logits.shape[-1]) < capacity
    return Routing(logits, probs, experts, weights, kept)


def seat_order(experts: torch.Tensor, num_experts: int) -> torch.Tensor:
    """(T, k): each choice's place in its expert's queue (0 first), filled with every token's
    first choice in token order, then every second choice, and so on."""
    by_priority = experts.t().reshape(-1)  # first choices of tokens 0..T-1, then second choices
    arrivals = F.one_hot(by_priority, num_experts)
    place = (arrivals.cumsum(dim=0) - 1).gather(1, by_priority[:, None])[:, 0]
    return place.reshape(experts.t().shape).t()


def expert_capacity(tokens: int, top_k: int, num_experts: int, capacity_factor: float) -> int:
    """Seats per expert: `capacity_factor` times its even share of the tokens x top_k choices."""
    return math.ceil(capacity_factor * tokens * top_k / num_experts)


def tokens_per_expert(routing: Routing, num_experts: int) -> torch.Tensor:
    """(E,) how many choices each expert received, dropped ones included (its demand)."""
    return torch.bincount(routing.experts.reshape(-1), minlength=num_experts)


def load_balancing_loss(routing: Routing) -> torch.Tensor:
    """Switch Transformer's auxiliary loss: E * sum over experts of (the fraction of the batch's
    choices routed to it) x (its mean router probability). 1.0 when routing is uniform; up to E
    when every token picks the same expert with certainty. (transformers'
    `load_balancing_loss_func` counts each token k times: k times this.)"""
    num_experts = routing.probs.shape[-1]
    fraction = tokens_per_expert(routing, num_experts) / routing.experts.numel()
    return num_experts * (fraction * routing.probs.mean(dim=0)).sum()


def combine(tokens: torch.Tensor, routing: Routing, experts) -> torch.Tensor:
    """(T, hidden): each token's kept choices' expert outputs, weighted and summed (zeros for a
    token whose every choice was dropped). Each expert runs once, on the tokens it received."""
    mixed = torch.zeros_like(tokens)
    for e, expert in enumerate(experts):
        token, choice = torch.where((routing.experts == e) & routing.kept)
        if len(token):
            weighted = expert(tokens[token]) * routing.weights[token, choice, None]
            mixed = mixed.index_add(0, token, weighted)
    return mixed


class MoELayer(nn.Module):
    """A router and `num_experts` experts; `forward(x)` returns `x` plus the weighted outputs
    of each token's kept experts, and the `Routing` (for the balancing loss and the counts)."""

    def __init__(
        self,
        hidden: int,
        ff: int,
        num_experts: int,
        top_k: int = 2,
        softmax: str = "before_top_k",
        renormalize: bool = True,
        capacity_factor: float | None = None,
        bias_rate: float = 0.0,
        weight_scale: float = 1.0,
    ):
        super().__init__()
        self.router = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(Expert(hidden, ff) for _ in range(num_experts))
        self.num_experts, self.top_k = num_experts, top_k
        self.softmax, self.renormalize = softmax, renormalize
        self.capacity_factor, self.bias_rate = capacity_factor, bias_rate
        self.weight_scale = weight_scale
        # Buffers, not parameters: the optimizer never touches them, and they are saved.
        self.register_buffer("balance_bias", torch.zeros(num_experts))
        self.register_buffer("load", torch.zeros(num_experts))  # choices since the last update

    def route(self, tokens: torch.Tensor) -> Routing:
        """The routing of `tokens` (T, hidden), with this layer's options."""
        capacity = None
        if self.capacity_factor is not None:
            capacity = expert_capacity(len(tokens), self.top_k, self.num_experts,
                                       self.capacity_factor)
        routing = route(self.router(tokens), self.top_k, self.softmax, self.renormalize,
                        self.balance_bias, capacity, self.weight_scale)
        if self.training:
            self.load += tokens_per_expert(routing, self.num_experts)
        return routing

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Routing]:
        tokens = x.reshape(-1, x.shape[-1])
        routing = self.route(tokens)
        return x + combine(tokens, routing, self.experts).reshape(x.shape), routing

    @torch.no_grad()
    def update_balance_bias(self) -> None:
        """DeepSeek-V3's step after each optimizer step: raise the bias of experts that took
        fewer choices than the average since the last update, lower it for those that took
        more, by `bias_rate`; then start counting again."""
        self.balance_bias += self.bias_rate * torch.sign(self.load.mean() - self.load)
        self.load.zero_()


class AddToLoss(torch.autograd.Function):
    """Forward: `x` unchanged. Backward: `loss` gets the gradient 1, as if it had been added to
    the training loss. A layer's auxiliary loss reaches the optimizer this way through any training
    loop, which calls backward on the model's loss and never sees this one."""

    @staticmethod
    def forward(ctx, x, loss):
        ctx.loss_dtype = loss.dtype
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, torch.ones((), dtype=ctx.loss_dtype, device=grad.device)


class MoEFeedForward(nn.Module):
    """An MoE layer in a transformer block's MLP place: returns the experts' weighted outputs only
    (the block adds its residual). In training it adds `aux_weight` x the balancing loss to the
    training loss (`AddToLoss`), moves the balance bias after every forward when the layer has a
    `bias_rate` (after every optimizer step, without gradient accumulation), and keeps each
    forward's choices per expert and share of choices dropped in `loads` and `dropped`."""

    def __init__(self, layer: MoELayer, aux_weight: float = 0.0):
        super().__init__()
        self.layer, self.aux_weight = layer, aux_weight
        self.loads: list[torch.Tensor] = []
        self.dropped: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        routing = self.layer.route(tokens)
        mixed = combine(tokens, routing, self.layer.experts).reshape(x.shape)
        if self.training:
            self.loads.append(tokens_per_expert(routing, self.layer.num_experts))
            self.dropped.append((~routing.kept).float().mean().item())
            if self.aux_weight:
                mixed = AddToLoss.apply(mixed, self.aux_weight * load_balancing_loss(routing))
            if self.layer.bias_rate:
                self.layer.update_balance_bias()
        return mixed


def with_experts(model: nn.Module, num_experts: int, top_k: int, ff: int,
                 capacity_factor: float | None = None, aux_weight: float = 0.0,
                 bias_rate: float = 0.0, renormalize: bool = True,
                 weight_scale: float = 1.0) -> nn.Module:
    """`model` (from build_model) with every block's MLP replaced, in place, by an MoE layer of
    `num_experts` SwiGLU experts of width `ff`, `top_k` per token. With one expert and top 1 it is
    a dense SwiGLU MLP (the router's one weight is always 1): the dense model to compare with."""
    hidden = model.config.hidden_size
    for block in transformer_blocks(model):
        block.mlp = MoEFeedForward(
            MoELayer(hidden, ff, num_experts, top_k, renormalize=renormalize,
                     capacity_factor=capacity_factor, bias_rate=bias_rate,
                     weight_scale=weight_scale), aux_weight)
    return model


def moe_layers(model: nn.Module) -> list[MoEFeedForward]:
    """The MoE layers `with_experts` put in `model`, first block first."""
    return [block.mlp for block in transformer_blocks(model)
            if isinstance(block.mlp, MoEFeedForward)]


def load_transformers_experts(layer: MoELayer, block: nn.Module) -> MoELayer:
    """Copy the router and expert weights of a transformers sparse MoE block (Mixtral's or
    Qwen2-MoE's: `block.gate.weight` (E, hidden); `block.experts.gate_up_proj` (E, 2 ff, hidden)
    and `down_proj` (E, hidden, ff)) into `layer`, in place; return it."""
    with torch.no_grad():
        layer.router.weight.copy_(block.gate.weight)
        for e, expert in enumerate(layer.experts):
            gate, up = block.experts.gate_up_proj[e].chunk(2, dim=0)
            expert.gate.weight.copy_(gate)
            expert.up.weight.copy_(up)
            expert.down.weight.copy_(block.experts.down_proj[e])
    return layer
