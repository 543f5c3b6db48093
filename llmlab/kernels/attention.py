"""A FlashAttention-style fused attention forward in Triton.

One program takes BLOCK_M query rows of one (batch, head) and walks over the keys and values in
tiles of BLOCK_N. It never holds the N x N score matrix: it keeps, for each query row, the
running maximum of its scores, the running softmax denominator and the running weighted sum of
values, and rescales the last two whenever the maximum grows (the online softmax).
"""

import math

import torch
import triton
import triton.language as tl

from llmlab.kernels import check_input


@triton.jit
def attention_forward_kernel(o_ptr, q_ptr, k_ptr, v_ptr, seq_len, scale,
                             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # q, k, v, o: contiguous (batch * heads, seq_len, HEAD_DIM); this program's head and rows.
    head = tl.program_id(1).to(tl.int64) * seq_len * HEAD_DIM
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows[:, None] < seq_len
    q = tl.load(q_ptr + head + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_ok, other=0.0)
    row_max = tl.full([BLOCK_M], -float("inf"), tl.float32)
    denominator = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # sum over keys of exp(score - max) * value
    end = seq_len
    if CAUSAL:  # later keys are masked out for every row of this tile: skip their tiles
        end = tl.minimum(seq_len, (tl.program_id(0) + 1) * BLOCK_M)
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols[:, None] < seq_len
        k = tl.load(k_ptr + head + cols[:, None] * HEAD_DIM + dims[None, :], mask=col_ok, other=0.0)
        v = tl.load(v_ptr + head + cols[:, None] * HEAD_DIM + dims[None, :], mask=col_ok, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale
        keep = cols[None, :] < seq_len
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        scores = tl.where(keep, scores, -float("inf"))  # key 0 is always kept: no row is all -inf
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        rescale = tl.exp(row_max - new_max)  # what was summed under the old max, brought to the new
        weights = tl.exp(scores - new_max[:, None])
        denominator = denominator * rescale + tl.sum(weights, axis=1)
        acc = acc * rescale[:, None] + tl.dot(weights.to(v.dtype), v)
        row_max = new_max
    out = acc / denominator[:, None]
    tl.store(o_ptr + head + rows[:, None] * HEAD_DIM + dims[None, :], out, mask=row_ok)


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                      block_m: int = 32, block_n: int = 32) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim)) v for (batch, heads, seq_len, head_dim) tensors, like
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)."""
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        check_input(name, tensor)
        if tensor.shape != q.shape or tensor.ndim != 4:
            raise ValueError(f"q, k and v must share one (batch, heads, seq_len, head_dim) shape; "
                             f"got q {tuple(q.shape)}, {name} {tuple(tensor.shape)}.")
    batch, heads, seq_len, head_dim = q.shape
    # tl.dot needs tiles of at least 16 and a power-of-2 extent along each axis.
    for what, size in (("head_dim", head_dim), ("block_m", block_m), ("block_n", block_n)):
        if size < 16 or size & (size - 1):
            raise ValueError(f"{what} is {size}: the kernel needs a power of 2, at least 16.")
    q, k, v = (t.reshape(batch * heads, seq_len, head_dim).contiguous() for t in (q, k, v))
    out = torch.empty_like(q)
    grid = (triton.cdiv(seq_len, block_m), batch * heads)
    attention_forward_kernel[grid](out, q, k, v, seq_len, 1 / math.sqrt(head_dim),
                                   HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n,
                                   CAUSAL=causal)
    return out.view(batch, heads, seq_len, head_dim)
