"""Context parallelism: one sequence split over ranks, attention computed without any rank holding
all of it.

Every other layer of a transformer treats positions independently, so each rank runs it on its
slice of the sequence. Attention is the one place where positions meet: every query needs every
earlier key and value. Two ways to give it them:

- Ring attention: each rank keeps its queries, and the keys and values travel round the ring of
  ranks (send to the next rank, receive from the previous), one block per step, `world` steps.
  Each step gives a partial attention over one block of keys; the partials are merged exactly by
  the online softmax (FlashAttention's rescaling), carried as one log-sum-exp per query row.
- Ulysses (DeepSpeed-Ulysses): one all-to-all turns "all heads, my positions" into "my heads, all
  positions"; each rank runs ordinary attention on its heads; a second all-to-all turns it back.
  Two collectives instead of a ring, but no more ranks than heads.

With a causal mask, a contiguous split gives the last rank the most work (its queries see every
key) and the first the least: the zig-zag split gives rank r chunks r and 2W-1-r of 2W, one early
and one late, and every rank the same work (`attention_work` counts it).

Tensors are (batch, heads, positions, head_dim), as torch's scaled_dot_product_attention takes.
"""

import math

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn

LAYOUTS = ("contiguous", "zigzag")

# ---------------------------------------------------------------------------------------------
# Which positions each rank holds.


def rank_chunks(rank: int, world: int, layout: str = "contiguous") -> list[int]:
    """The chunks of the sequence `rank` holds, in order: chunk `rank` of `world` (contiguous), or
    chunks `rank` and 2*world-1-rank of 2*world (zigzag)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return [rank] if layout == "contiguous" else [rank, 2 * world - 1 - rank]


def shard_sequence(x: torch.Tensor, world: int, layout: str = "contiguous") -> list[torch.Tensor]:
    """Each rank's part of `x` along its positions (dim -2), in rank order."""
    chunks_per_rank = len(rank_chunks(0, world, layout))
    if x.shape[-2] % (world * chunks_per_rank):
        raise ValueError(f"{x.shape[-2]} positions do not split into {world * chunks_per_rank} "
                         f"equal chunks ({world} ranks, {layout})")
    chunks = x.chunk(world * chunks_per_rank, dim=-2)
    return [torch.cat([chunks[c] for c in rank_chunks(r, world, layout)], dim=-2)
            for r in range(world)]


def unshard_sequence(shards: list[torch.Tensor], layout: str = "contiguous") -> torch.Tensor:
    """The inverse of `shard_sequence`: the whole sequence from each rank's part."""
    world = len(shards)
    placed = {}
    for rank, shard in enumerate(shards):
        chunks = rank_chunks(rank, world, layout)
        placed.update(zip(chunks, shard.chunk(len(chunks), dim=-2), strict=True))
    return torch.cat([placed[c] for c in sorted(placed)], dim=-2)


def attention_work(seq_len: int, world: int, layout: str = "contiguous") -> list[int]:
    """Query-key pairs each rank's causal attention keeps (query position p sees keys 0..p)."""
    positions = shard_sequence(torch.arange(seq_len).view(seq_len, 1), world, layout)
    return [int((rank_positions + 1).sum()) for rank_positions in positions]


# ---------------------------------------------------------------------------------------------
# One block of attention, and merging two blocks' results.


def block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of queries `q` over one block of keys and values: the output and each query
    row's log-sum-exp of its scores (what merging needs). `causal`: q and k are the same
    positions (the diagonal block), so query i sees keys 0..i of it."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        later = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(diagonal=1)
        scores = scores.masked_fill(later, -math.inf)
    lse = scores.logsumexp(dim=-1, keepdim=True)
    return torch.exp(scores - lse) @ v, lse


def merge_attention(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor,
                    block_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over keys A and B from attention over A (`out`, `lse`) and over B: each output is
    a softmax-weighted mean, so weight each by its share of the combined softmax denominator,
    exp(its log-sum-exp - the combined one). The online softmax's rescaling, in log space."""
    combined = torch.logaddexp(lse, block_lse)
    return out * torch.exp(lse - combined) + block_out * torch.exp(block_lse - combined), combined


# ---------------------------------------------------------------------------------------------
# Ring attention.


def _shift(x: torch.Tensor, step: int, group) -> torch.Tensor:
    """Send `x` to the rank `step` places on in the ring; return what the rank `step` places back
    sent. Sends and receives go together (batch_isend_irecv): if every rank sent first and
    received second, every rank could block in its send, waiting for a receive."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    received = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x.contiguous(), group=group, group_peer=(rank + step) % world),
           dist.P2POp(dist.irecv, received, group=group, group_peer=(rank - step) % world)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return received


class PassToNextRank(torch.autograd.Function):
    """Forward: send to the next rank, receive from the previous one. Backward: the gradient
    goes the other way round the ring, back to the rank whose tensor it is the gradient of."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _shift(x, 1, group)

    @staticmethod
    def backward(ctx, grad):
        return _shift(grad, -1, ctx.group), None


def pass_to_next(x: torch.Tensor, group=None) -> torch.Tensor:
    """Send `x` to the next rank of the ring and return what the previous rank sent; in backward,
    the gradient goes back the other way. Every rank must call it, in the same order."""
    return PassToNextRank.apply(x, group)


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   layout: str = "contiguous", group=None) -> torch.Tensor:
    """Causal attention over the whole sequence, for this rank's queries (its part of the
    sequence, as `shard_sequence` splits it by `layout`). Differentiable: the backward is
    autograd's through every block and every pass round the ring."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    mine = rank_chunks(rank, world, layout)
    queries = q.chunk(len(mine), dim=-2)
    results = [None] * len(mine)  # per query chunk: (output, log-sum-exp) over the keys so far
    kv = torch.stack([k, v])  # one tensor round the ring: one pass per step, in one order
    for step in range(world):
        source = (rank - step) % world  # whose keys and values this rank holds now
        keys = rank_chunks(source, world, layout)
        for i, (query_chunk, query) in enumerate(zip(mine, queries, strict=True)):
            for key_chunk, block in zip(keys, kv.chunk(len(keys), dim=-2), strict=True):
                if key_chunk > query_chunk:
                    continue  # later positions: the causal mask hides all of it
                part = block_attention(query, block[0], block[1], causal=key_chunk == query_chunk)
                results[i] = part if results[i] is None else merge_attention(*results[i], *part)
        if step < world - 1:
            kv = pass_to_next(kv, group)
    out = torch.cat([result[0] for result in results], dim=-2)
    # Every pass's backward must run on every rank, or a neighbour waits forever for its
    # gradient: tie the last keys and values received to the output, even when all were masked.
    return out + 0 * kv.sum()


# ---------------------------------------------------------------------------------------------
# Ulysses.


def _all_to_all(x: torch.Tensor, split_dim: int, join_dim: int, group) -> torch.Tensor:
    """Cut `x` into `world` pieces along `split_dim`, send piece r to rank r, and join the pieces
    received along `join_dim`, in rank order. Differentiable (its backward is the reverse
    all-to-all)."""
    world = dist.get_world_size(group)
    pieces = [piece.contiguous() for piece in x.chunk(world, dim=split_dim)]
    received = dist_fn.all_to_all([torch.empty_like(p) for p in pieces], pieces, group=group)
    return torch.cat(received, dim=join_dim)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      group=None) -> torch.Tensor:
    """Causal attention over the whole sequence for this rank's contiguous part of it, computed
    head-sharded: all positions of heads / world heads per rank, between two all-to-alls."""
    world, heads = dist.get_world_size(group), q.shape[1]
    if heads % world:
        raise ValueError(f"Ulysses gives each of {world} ranks heads / {world} heads: {heads} "
                         f"heads do not divide; use ring attention, or a head count {world} "
                         "divides")
    # (batch, heads, my positions, d) -> (batch, my heads, all positions, d)
    q, k, v = (_all_to_all(t, split_dim=1, join_dim=2, group=group) for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return _all_to_all(out, split_dim=2, join_dim=1, group=group)
