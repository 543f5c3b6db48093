"""Expert and context parallelism against one process: functions each rank runs under `launch`,
returning how far its part is from the same computation done whole, forward and backward.

- `expert_parallel_differences`: an MoE layer's experts split over the ranks
  (`ExpertParallelMoE`), each rank with its own tokens, against the whole layer on those tokens.
- `context_parallel_differences`: one sequence split over the ranks, attention by ring (contiguous
  or zig-zag split) or by Ulysses, against full causal attention (`scaled_dot_product_attention`).
- `communication_times`: two ranks exchanging a message, and an all-to-all, timed, to check the
  alpha-beta model's all-to-all (llmlab.scale.collectives) against the real one.
"""

import copy
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from llmlab.distributed import context_parallel
from llmlab.distributed.context_parallel import shard_sequence
from llmlab.distributed.expert_parallel import ExpertParallelMoE
from llmlab.models.moe import MoELayer

METHODS = ("ring", "ulysses")


def expert_parallel_differences(hidden: int = 8, ff: int = 12, num_experts: int = 12,
                                tokens: int = 10, capacity_factor: float | None = None,
                                seed: int = 0) -> dict:
    """This rank's largest differences from the whole layer, in its output and in the gradients of
    its input, of the router (summed over ranks, as data parallelism does) and of its experts;
    with the choices dropped by capacity and the bytes of tokens it sent to other ranks. Rank r
    has `tokens + 3r` tokens (uneven on purpose); the router is scaled up so that the choices
    spread unevenly over the ranks."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)  # the same layer and every rank's tokens, on every rank
    whole = MoELayer(hidden, ff, num_experts, top_k=2, capacity_factor=capacity_factor)
    with torch.no_grad():
        whole.router.weight.mul_(3)
    split = ExpertParallelMoE(copy.deepcopy(whole))
    inputs = [torch.randn(tokens + 3 * r, hidden) for r in range(world)]
    upstream = [torch.randn(x.shape) for x in inputs]  # an uneven output gradient
    # The whole layer, rank by rank: a capacity applies to each rank's own tokens.
    references = [x.clone().requires_grad_(True) for x in inputs]
    sum((whole(x)[0] * g).sum() for x, g in zip(references, upstream, strict=True)).backward()
    x = inputs[rank].clone().requires_grad_(True)
    out, _ = split(x)
    (out * upstream[rank]).sum().backward()
    router_grad = split.layer.router.weight.grad
    dist.all_reduce(router_grad)
    expert_grads = [
        (mine.weight.grad - theirs.weight.grad).abs().max().item()
        for e, expert in enumerate(split.layer.experts)
        for mine, theirs in zip(expert.children(), whole.experts[split.first + e].children(),
                                strict=True)
    ]
    with torch.no_grad():
        expected_out = whole(inputs[rank])[0]
        dropped = (~whole.route(inputs[rank]).kept).sum().item()
    return {
        "output": (out - expected_out).abs().max().item(),
        "input grad": (x.grad - references[rank].grad).abs().max().item(),
        "router grad": (router_grad - whole.router.weight.grad).abs().max().item(),
        "expert grads": max(expert_grads),
        "dropped": dropped,
        "sent bytes": split.sent_bytes,
    }


def context_parallel_differences(method: str, seq_len: int, heads: int = 3, head_dim: int = 8,
                                 layout: str = "contiguous", seed: int = 0) -> dict[str, float]:
    """This rank's largest differences from full causal attention over the whole sequence (fp32,
    computed on every rank), in its part of the output and of the gradients of q, k and v."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)  # the same whole sequence on every rank
    q, k, v = (torch.randn(2, heads, seq_len, head_dim, requires_grad=True) for _ in range(3))
    out_grad = torch.randn(2, heads, seq_len, head_dim)  # an uneven gradient reaching the output
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    full.backward(out_grad)
    mine = [shard_sequence(t.detach(), world, layout)[rank].requires_grad_() for t in (q, k, v)]
    if method == "ring":
        out = context_parallel.ring_attention(*mine, layout=layout)
    else:
        out = context_parallel.ulysses_attention(*mine)
    out.backward(shard_sequence(out_grad, world, layout)[rank])
    pairs = {"output": (out, full)} | {
        f"{name} grad": (local.grad, whole.grad)
        for name, local, whole in zip("qkv", mine, (q, k, v), strict=True)}
    return {what: (local - shard_sequence(whole.detach(), world, layout)[rank]).abs().max().item()
            for what, (local, whole) in pairs.items()}


def torch_context_parallel_difference(seq_len: int = 64, heads: int = 4,
                                      head_dim: int = 16) -> float:
    """PyTorch's own context parallelism (`torch.distributed.tensor.experimental.context_parallel`,
    which shards the buffers over a device mesh and runs its ring inside
    `scaled_dot_product_attention`) against full causal attention: the largest difference of the
    gathered output. On GPUs under NCCL; PyTorch has no sharding rule for the CPU's attention
    kernel, so on CPU ranks it raises NotImplementedError."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    mesh = init_device_mesh(device, (dist.get_world_size(),))
    torch.manual_seed(0)  # the same whole sequence on every rank
    q, k, v = (torch.randn(2, heads, seq_len, head_dim, device=device) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    (out,) = context_parallel_unshard(mesh, [out], [2])
    return (out - full).abs().max().item()


def communication_times(sizes: Sequence[int], repeats: int = 30) -> dict[str, dict[int, float]]:
    """The fastest of `repeats` runs (after one warm-up; the least disturbed by the machine's other
    work) of, for each size in bytes (fp32; a multiple of 4 x the ranks): "exchange", ranks 0 and
    1 sending each other a message of that size at once (what every rank of an all-to-all does
    with each other rank); "all_to_all", an all-to-all of a buffer of that size on every rank,
    split evenly. Each run's time is the slowest rank's; every rank returns the same numbers."""
    rank, world = dist.get_rank(), dist.get_world_size()
    times: dict[str, dict[int, float]] = {"exchange": {}, "all_to_all": {}}
    for size in sizes:
        if size % (4 * world):
            raise ValueError(f"size {size} is not a whole number of fp32 values per rank: use a "
                             f"multiple of {4 * world}")
        buffer, received = torch.zeros(size // 4), torch.empty(size // 4)

        def exchange(buffer=buffer, received=received) -> None:
            if rank < 2:
                for request in (dist.isend(buffer, 1 - rank), dist.irecv(received, 1 - rank)):
                    request.wait()

        times["exchange"][size] = _fastest_seconds(exchange, repeats)
        times["all_to_all"][size] = _fastest_seconds(
            lambda buffer=buffer, received=received: dist.all_to_all_single(received, buffer),
            repeats)
    return times


def _fastest_seconds(operation: Callable[[], None], repeats: int) -> float:
    """The fastest of `repeats` runs (one more first, to warm up) of the slowest rank's time,
    every rank starting together."""
    seconds = []
    for repeat in range(repeats + 1):
        dist.barrier()
        start = time.perf_counter()
        operation()
        elapsed = torch.tensor(time.perf_counter() - start, dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if repeat:
            seconds.append(elapsed.item())
    return min(seconds)
