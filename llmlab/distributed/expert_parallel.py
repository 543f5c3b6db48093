"""Expert parallelism: each rank holds num_experts / world_size of an MoE layer's experts, and
tokens travel to the ranks that hold their experts.

Each rank routes its own tokens (the router is whole on every rank, like the rest of the model
outside the experts; its gradient is summed over ranks as data parallelism does). Then:
1. dispatch: sort this rank's choices by expert (the experts of rank r are a contiguous block, so
   this groups them by rank), tell every rank how many it will receive (an all-to-all of the
   counts), and send each rank its tokens (an all-to-all of uneven sizes);
2. each rank runs its experts on what it received;
3. combine: the reverse all-to-all sends each output back to the rank its token came from, which
   adds them up with their weights, as the single-process layer does.
The backward pass runs the same all-to-alls the other way round. A capacity limit applies to each
rank's own tokens (GShard's local dispatch): each expert takes at most `capacity` of them.
"""

import torch
import torch.distributed as dist
from torch import nn

from llmlab.models.moe import MoELayer, Routing


class AllToAll(torch.autograd.Function):
    """Send `x`'s first `send_counts[r]` rows to rank r, the next ones to rank r + 1...; receive
    `recv_counts[r]` rows from each rank r, in rank order. Its gradient goes back the same way,
    with the counts swapped."""

    @staticmethod
    def forward(ctx, x, send_counts, recv_counts, group):
        ctx.send_counts, ctx.recv_counts, ctx.group = send_counts, recv_counts, group
        out = x.new_empty(sum(recv_counts), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), recv_counts, send_counts, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return AllToAll.apply(grad, ctx.recv_counts, ctx.send_counts, ctx.group), None, None, None


def exchange_counts(send_counts: torch.Tensor, group=None) -> torch.Tensor:
    """What each rank will send to this one, from what this one sends to each (an all-to-all of
    one number per rank): the receiver must size its buffer before the tokens arrive."""
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    return recv_counts


class ExpertParallelMoE(nn.Module):
    """This rank's part of `layer`: its whole router and its block of experts, experts
    `rank * E / world` up to (not including) `(rank + 1) * E / world`. `forward(x)` takes this
    rank's tokens and returns what `layer` returns for them. `layer` keeps only this rank's
    experts afterwards: call this module, not `layer`."""

    def __init__(self, layer: MoELayer, group=None):
        super().__init__()
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        num_experts = layer.num_experts
        if num_experts % world:
            raise ValueError(f"{world} ranks do not divide the layer's {num_experts} experts")
        self.per_rank = num_experts // world
        self.first = rank * self.per_rank
        self.layer, self.group, self.world = layer, group, world
        # This rank's experts only: the others' parameters are never used here.
        layer.experts = nn.ModuleList(layer.experts[self.first:self.first + self.per_rank])
        self.sent_bytes = 0  # bytes of tokens this rank sent to other ranks, dispatch and combine

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Routing]:
        tokens = x.reshape(-1, x.shape[-1])
        routing = self.layer.route(tokens)  # the router is whole: it knows every expert
        token, choice = torch.where(routing.kept)
        expert = routing.experts[token, choice]
        order = expert.argsort(stable=True)  # grouped by expert, so by the rank that holds it
        token, choice, expert = token[order], choice[order], expert[order]
        send_counts = torch.bincount(expert // self.per_rank, minlength=self.world)
        recv_counts = exchange_counts(send_counts, self.group)
        send, recv = send_counts.tolist(), recv_counts.tolist()
        arrived = AllToAll.apply(tokens[token], send, recv, self.group)
        arrived_expert = torch.empty(sum(recv), dtype=expert.dtype)  # whose row is whose
        dist.all_to_all_single(arrived_expert, expert, recv, send, group=self.group)
        processed = torch.zeros_like(arrived)
        for local, module in enumerate(self.layer.experts):
            mine = torch.where(arrived_expert == self.first + local)[0]
            processed = processed.index_copy(0, mine, module(arrived[mine]))
        returned = AllToAll.apply(processed, recv, send, self.group)
        weighted = returned * routing.weights[token, choice, None]
        mixed = torch.zeros_like(tokens).index_add(0, token, weighted)
        rows = self._rows_to_others(send) + self._rows_to_others(recv)
        self.sent_bytes += rows * tokens.shape[-1] * tokens.element_size()
        return x + mixed.reshape(x.shape), routing

    def _rows_to_others(self, counts: list[int]) -> int:
        rank = dist.get_rank(self.group)
        return sum(n for r, n in enumerate(counts) if r != rank)
