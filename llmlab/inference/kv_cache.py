"""GPT-2's forward written out, with the attention as a pluggable step: all of it recomputed
(FullAttention), or a KV cache that keeps each layer's keys and values (KVCache).

Generating token t+1 needs attention of the new token over the keys and values of tokens 0..t.
Recomputing them all every step costs O(t) per token; keeping them costs O(1) per token in the
projections and MLP (only the attention over the cached keys still grows with t). The same
weights, in the same order, give the same logits either way: the checks compare them.

An attention object has two methods, which `decoder_forward` calls:
- `positions(n_new)`: the positions of the n_new tokens this call feeds (for the position
  embedding);
- `attend(layer, q, k, v)`: the attention output of the new queries, each of shape
  (batch, heads, n_new, head_dim).
"""

import torch
import torch.nn.functional as F


class FullAttention:
    """No cache: every call feeds the whole sequence, which attends causally over itself."""

    def positions(self, n_new: int) -> torch.Tensor:
        return torch.arange(n_new)

    def attend(self, layer: int, q, k, v) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class KVCache:
    """Each layer's keys and values so far: a call feeds only the new tokens (the prompt into an
    empty cache, then one token at a time), which attend over everything cached."""

    def __init__(self, n_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

    def __len__(self) -> int:
        """Positions cached so far (layer 0's: it is the first to see a call's tokens)."""
        return 0 if self.keys[0] is None else self.keys[0].shape[-2]

    def positions(self, n_new: int) -> torch.Tensor:
        # The new tokens come after the cached ones: their positions start at the cache's length.
        return torch.arange(len(self), len(self) + n_new)

    def attend(self, layer: int, q, k, v) -> torch.Tensor:
        if self.keys[layer] is not None:  # append along the sequence axis, never replace
            k = torch.cat([self.keys[layer], k], dim=-2)
            v = torch.cat([self.values[layer], v], dim=-2)
        self.keys[layer], self.values[layer] = k, v
        n_new, n_all = q.shape[-2], k.shape[-2]
        # New query i sits at position n_all - n_new + i: it sees every key up to that one. (A
        # single new token sees them all; is_causal=True would align its mask to key 0 instead.)
        visible = torch.ones(n_new, n_all, dtype=torch.bool, device=q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible.tril(n_all - n_new))


@torch.no_grad()
def decoder_forward(model, ids: torch.Tensor, attention) -> torch.Tensor:
    """Logits (batch, n_new, vocab) of a Hugging Face GPT-2 (GPT2LMHeadModel, in eval mode) for
    the new token ids (batch, n_new), its attention done by `attention`."""
    t, heads = model.transformer, model.config.n_head
    positions = torch.as_tensor(attention.positions(ids.shape[1]), device=ids.device)
    x = t.wte(ids) + t.wpe(positions)
    for layer, block in enumerate(t.h):
        q, k, v = block.attn.c_attn(block.ln_1(x)).split(x.shape[-1], dim=-1)
        # (batch, n_new, d) -> (batch, heads, n_new, d / heads): one attention per head.
        q, k, v = (z.unflatten(-1, (heads, -1)).transpose(1, 2) for z in (q, k, v))
        out = attention.attend(layer, q, k, v)
        x = x + block.attn.c_proj(out.transpose(1, 2).flatten(-2))
        x = x + block.mlp(block.ln_2(x))
    return model.lm_head(t.ln_f(x))
