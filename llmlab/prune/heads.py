"""Structured pruning of attention heads: slice whole heads out of the attention projections.

transformers 5 has no `prune_heads`, so this slices the weights itself. A head h owns columns
h*d_head..(h+1)*d_head of the query, key and value projections and the same rows of the output
projection's input. Zeroing its output-projection weights silences it (the masked model);
slicing it out everywhere gives a smaller model that computes the same function.

- Llama: the config holds the head count (num_attention_heads, num_key_value_heads, head_dim),
  so the smaller model reloads with from_pretrained. With grouped-query attention a key/value
  head serves a group of query heads: whole groups are removed (the key/value head and its
  queries), so every remaining key/value head still serves the same number of queries.
- GPT-2: the smaller model runs in memory, but GPT2Config cannot describe it (GPT2Attention
  derives d_head = n_embd / n_head), so it does not reload; `remove_heads` says so and
  `save_pretrained` of it gives files from_pretrained refuses (a shape mismatch).

Both configs hold one head count for every layer, so every layer keeps the same number of heads.
Importance is a weight-norm score (no data needed): ||value slice|| * ||output slice|| of a head,
the two matrices through which it writes into the residual stream (queries and keys only decide
where it looks). Summed over the query heads of a group under grouped-query attention.
"""

from dataclasses import dataclass

import torch
from torch import nn

from llmlab.models import input_dim, named_blocks, transformer_blocks
from llmlab.models.finite import require_finite
from llmlab.prune.keep import current_weight
from llmlab.prune.structured import output_dim, sliced


@dataclass(frozen=True)
class Heads:
    """A model's attention layout: n_head query heads of d_head, in n_kv groups."""

    n_head: int
    n_kv: int
    d_head: int

    @property
    def group(self) -> int:
        return self.n_head // self.n_kv  # query heads per key/value head


def attention_heads(model: nn.Module) -> Heads:
    config, family = model.config, getattr(model.config, "model_type", None)
    if family == "gpt2":
        return Heads(config.n_head, config.n_head, config.n_embd // config.n_head)
    if family == "llama":
        heads = config.num_attention_heads
        d_head = getattr(config, "head_dim", None) or config.hidden_size // heads
        return Heads(config.num_attention_heads, config.num_key_value_heads, d_head)
    raise TypeError(f"attention-head removal knows 'gpt2' and 'llama' models, not {family!r}")


def _attention(block: nn.Module) -> nn.Module:
    return block.attn if hasattr(block, "attn") else block.self_attn


def _output(attention: nn.Module) -> nn.Module:
    return attention.c_proj if hasattr(attention, "c_proj") else attention.o_proj


def _runs(indices: torch.Tensor, width: int) -> torch.Tensor:
    """Each index i stands for the run i*width .. (i+1)*width - 1: the features of a head, or
    the query heads of a key/value group."""
    return (indices[:, None] * width + torch.arange(width)).flatten()


def _value_weight(attention: nn.Module, layout: Heads) -> torch.Tensor:
    """The value projection as (kv features, d_model), whatever the family stores."""
    if hasattr(attention, "c_attn"):
        width = layout.n_head * layout.d_head
        return current_weight(attention.c_attn)[:, 2 * width :].T  # Conv1D: (in, q|k|v)
    return current_weight(attention.v_proj)


def head_scores(model: nn.Module) -> list[torch.Tensor]:
    """Per block, one score per query head (equal within a key/value group, which is removed
    whole): ||W_V of its key/value head|| * sum over the group of ||W_O of its query heads||."""
    layout = attention_heads(model)
    scores = []
    for block in transformer_blocks(model):
        attention = _attention(block)
        value = _value_weight(attention, layout).reshape(layout.n_kv, -1).norm(dim=1)
        output = _output(attention)
        out_rows = current_weight(output).movedim(input_dim(output), 0)  # (head features, d)
        out_norms = out_rows.reshape(layout.n_head, -1).norm(dim=1)
        group_score = value * out_norms.view(layout.n_kv, layout.group).sum(1)
        scores.append(group_score.repeat_interleave(layout.group))
    return scores


def kept_heads(model: nn.Module, keep: int, scores=None) -> list[torch.Tensor]:
    """Per block, the sorted indices of the `keep` query heads to keep: the highest scores
    (default: `head_scores`), in whole key/value groups, the same number in every block."""
    layout = attention_heads(model)
    if keep < 1:
        raise ValueError(
            f"keeping {keep} heads would remove every attention head of each layer, and the "
            "layer would then add nothing but its bias: keep at least one"
        )
    if keep > layout.n_head:
        raise ValueError(f"the model has {layout.n_head} heads per layer: cannot keep {keep}")
    if keep % layout.group:
        raise ValueError(
            f"with grouped-query attention ({layout.group} query heads per key/value head) heads "
            f"go in whole groups: keep a multiple of {layout.group}, not {keep}"
        )
    scores = head_scores(model) if scores is None else scores
    kept = []
    for index, layer_scores in enumerate(scores):
        # a NaN score would rank its group above every other and keep it: refused, by block
        require_finite(layer_scores, f"the head-score tensor of block {index}")
        group_scores = layer_scores.view(layout.n_kv, layout.group).sum(1)
        groups = group_scores.topk(keep // layout.group).indices.sort().values
        kept.append(_runs(groups, layout.group))
    return kept


def _groups_of(heads: torch.Tensor, layout: Heads, where: str) -> torch.Tensor:
    """The key/value groups of sorted head indices, which must be whole groups."""
    heads = torch.as_tensor(heads, dtype=torch.long).sort().values
    if heads.numel() == 0:
        raise ValueError(f"{where}: no head kept: a layer needs at least one attention head")
    in_range = 0 <= int(heads.min()) and int(heads.max()) < layout.n_head
    if heads.unique().numel() != heads.numel() or not in_range:
        raise ValueError(f"{where}: head indices must be distinct, in 0..{layout.n_head - 1}")
    groups = heads.div(layout.group, rounding_mode="floor").unique()
    if not torch.equal(_runs(groups, layout.group), heads):
        raise ValueError(
            f"{where}: the kept heads {heads.tolist()} split a key/value group of "
            f"{layout.group} query heads: keep or remove whole groups"
        )
    return groups


def head_masks(model: nn.Module, kept: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keep-masks (for `apply_masks`) that zero the output-projection weights of removed heads."""
    layout = attention_heads(model)
    masks = {}
    for (block_name, block), keep in zip(named_blocks(model), kept, strict=True):
        _groups_of(keep, layout, block_name)
        attention = _attention(block)
        output = _output(attention)
        alive = torch.zeros(output.weight.shape[input_dim(output)], dtype=torch.bool)
        alive[_runs(torch.as_tensor(keep), layout.d_head)] = True
        shape = [1, 1]
        shape[input_dim(output)] = -1
        name = next(n for n, m in attention.named_children() if m is output)
        attention_name = next(n for n, m in block.named_children() if m is attention)
        masks[f"{block_name}.{attention_name}.{name}.weight"] = (
            alive.view(shape).expand_as(output.weight).clone()
        )
    return masks


def remove_heads(model: nn.Module, kept: list[torch.Tensor]) -> nn.Module:
    """Slice every attention layer down to its kept heads, in place (masks on the attention
    projections are folded in). Llama: the config's head counts follow, so save_pretrained /
    from_pretrained give the smaller model. GPT-2: runs in memory only (see the module doc)."""
    layout = attention_heads(model)
    blocks = transformer_blocks(model)
    counts = {len(keep) for keep in kept}
    if len(kept) != len(blocks) or len(counts) != 1:
        raise ValueError(
            f"need one head list per block ({len(blocks)}), all of one length (the config has "
            f"one head count), got {len(kept)} lists of lengths {sorted(counts)}"
        )
    n_keep = counts.pop()
    names = [name for name, _ in named_blocks(model)]
    groups = [_groups_of(keep, layout, name) for name, keep in zip(names, kept, strict=True)]
    d_model = model.config.hidden_size
    if model.config.model_type == "llama" and d_model % n_keep:
        # LlamaConfig refuses a head count that does not divide hidden_size (even with head_dim
        # set), so such a model would not reload.
        fits = [n for n in range(layout.group, layout.n_head + 1, layout.group) if d_model % n == 0]
        raise ValueError(
            f"LlamaConfig needs the head count to divide hidden_size={d_model}: keeping {n_keep} "
            f"heads would not reload; keep one of {fits}"
        )
    for block, keep, block_groups in zip(blocks, kept, groups, strict=True):
        heads = torch.as_tensor(keep, dtype=torch.long).sort().values
        _slice_attention(_attention(block), layout, heads, block_groups)
    if model.config.model_type == "llama":
        model.config.num_attention_heads = n_keep
        model.config.num_key_value_heads = n_keep // layout.group
        model.config.head_dim = layout.d_head  # no longer hidden_size / heads
    return model


def _slice_attention(attention: nn.Module, layout: Heads, heads, groups) -> None:
    query_columns = _runs(heads, layout.d_head)
    kv_columns = _runs(groups, layout.d_head)
    output = _output(attention)
    smaller_output = sliced(output, input_dim(output), query_columns)
    if hasattr(attention, "c_attn"):
        width = layout.n_head * layout.d_head  # q | k | v side by side in c_attn's outputs
        columns = torch.cat([query_columns, kv_columns + width, kv_columns + 2 * width])
        attention.c_attn = sliced(attention.c_attn, output_dim(attention.c_attn), columns)
        attention.c_proj = smaller_output
        attention.num_heads = len(heads)
        attention.split_size = len(heads) * layout.d_head  # c_attn's outputs split in three
        return
    attention.q_proj = sliced(attention.q_proj, 0, query_columns)
    attention.k_proj = sliced(attention.k_proj, 0, kv_columns)
    attention.v_proj = sliced(attention.v_proj, 0, kv_columns)
    attention.o_proj = smaller_output
