"""Tensor parallelism (Megatron-style): split each block's matrices over ranks, not the batch.

An MLP is two matmuls. Split the first one by columns (each rank computes some of the hidden
units, whole) and the second by rows (each rank multiplies its hidden units by its rows): each rank
ends with a partial sum of the output, and one all-reduce adds them up. Attention splits the same
way, by heads. Per block that is two all-reduces of the activations (batch x seq x width) in the
forward pass and two in the backward pass, among ranks that must therefore sit close together.

Two versions live here:
- `ColumnRowParallelMLP`, by hand, with the two conjugate communication ops as autograd
  Functions: `CopyToTensorParallel` (identity forward, all-reduce backward) before the column
  split and `ReduceFromTensorParallel` (all-reduce forward, identity backward) after the row split;
- `apply_tensor_parallel`, the library way: `parallelize_module` with `ColwiseParallel` and
  `RowwiseParallel` on the attention and MLP of the GPT-2 and Llama models `build_model` makes.
  Weights become DTensors sharded over the mesh; the ops above happen inside DTensor.

Sequence parallelism (Korthikanti et al. 2022), `sequence_parallel=True`: without it the norms
and residual additions between the split matmuls are computed whole on every rank, and their
activations are stored tp times over. With it, each rank keeps only its slice of the sequence
positions there: each all-reduce becomes a reduce-scatter (into sequence slices) and an
all-gather (before the next split matmul), which send the same bytes, and those activations take
1/tp of the memory. Megatron-LM's flag is `--sequence-parallel`.
"""

import re

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from transformers.pytorch_utils import Conv1D

from llmlab.distributed.mesh import check_tensor_parallel
from llmlab.models import model_shape
from llmlab.models.blocks import linear_from_conv1d, transformer_blocks

# ---------------------------------------------------------------------------------------------
# By hand: the two conjugate ops and a column-parallel -> row-parallel MLP.


class CopyToTensorParallel(torch.autograd.Function):
    """f: every rank gets the same input (identity); in backward each rank holds only its share
    of the input's gradient (from its own columns), so the shares are summed (all-reduce)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()  # all_reduce works in place; autograd may still need `grad`
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTensorParallel(torch.autograd.Function):
    """g: each rank's row-split matmul gives a partial sum of the output: add them up
    (all-reduce); the output's gradient is already whole on every rank (identity backward)."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ColumnRowParallelMLP(nn.Module):
    """This rank's part of `fc_out(activation(fc_in(x)))`: the hidden units (rows of fc_in,
    columns of fc_out, in nn.Linear's (out, in) layout) that fall to it within `group`."""

    def __init__(self, fc_in: nn.Linear, fc_out: nn.Linear, activation=F.gelu, group=None):
        super().__init__()
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        hidden = fc_in.out_features
        if hidden % world:
            raise ValueError(f"{world} ranks do not divide the MLP's {hidden} hidden units")
        mine = slice(rank * hidden // world, (rank + 1) * hidden // world)
        self.w_in = nn.Parameter(fc_in.weight.detach()[mine].clone())
        self.b_in = nn.Parameter(fc_in.bias.detach()[mine].clone())
        self.w_out = nn.Parameter(fc_out.weight.detach()[:, mine].clone())
        # The output bias is added once, after the sum: added before it, it would count tp times.
        self.b_out = nn.Parameter(fc_out.bias.detach().clone())
        self.activation, self.group = activation, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = CopyToTensorParallel.apply(x, self.group)
        hidden = self.activation(F.linear(x, self.w_in, self.b_in))  # no communication
        partial = F.linear(hidden, self.w_out)
        return ReduceFromTensorParallel.apply(partial, self.group) + self.b_out


# ---------------------------------------------------------------------------------------------
# The library way, on transformers' GPT-2 and Llama models.


class SplitQKV(nn.Module):
    """GPT-2's fused `c_attn` as three linear layers whose outputs are concatenated.

    c_attn's output is [all query heads | all key heads | all value heads]. Cut into tp column
    blocks naively, rank 0 would get all the queries and part of the keys: heads torn apart. Split
    q, k and v each by columns instead, and rank r computes [its q heads | its k heads | its v
    heads]: the layout GPT-2's attention expects, with d_model / tp for its `split_size`.
    """

    def __init__(self, q: nn.Linear, k: nn.Linear, v: nn.Linear):
        super().__init__()
        self.q, self.k, self.v = q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.q(x), self.k(x), self.v(x)], dim=-1)


def prepare_for_tensor_parallel(model: nn.Module) -> nn.Module:
    """Make a GPT-2 model's blocks splittable, in place, computing the same function: Conv1D
    layers become nn.Linear and the fused q|k|v projection becomes `SplitQKV`. Llama's
    blocks are already nn.Linear with separate q, k, v: nothing to do."""
    for block in transformer_blocks(model):
        if not hasattr(block, "attn"):
            continue
        attn, width = block.attn, block.attn.embed_dim
        if isinstance(attn.c_attn, Conv1D):
            q, k, v = (linear_from_conv1d(attn.c_attn, slice(i * width, (i + 1) * width))
                       for i in range(3))
            attn.c_attn = SplitQKV(q, k, v)
        for parent, name in ((attn, "c_proj"), (block.mlp, "c_fc"), (block.mlp, "c_proj")):
            if isinstance(getattr(parent, name), Conv1D):
                setattr(parent, name, linear_from_conv1d(getattr(parent, name)))
    return model


def tensor_parallel_plan(
    model: nn.Module, sequence_parallel: bool = False
) -> dict[str, ParallelStyle]:
    """What to split in each block, by module name within the block.

    Column-parallel layers take the whole input and give this rank's columns; row-parallel ones
    take those columns and give the whole output (one all-reduce). Where several column-parallel
    layers read the same input (q, k, v; Llama's gate and up), `PrepareModuleInput` makes that
    input a whole DTensor once, so the backward pass sums their gradient shares in one
    all-reduce rather than one per layer. With `sequence_parallel`, the stream between the split
    layers is sliced by position (Shard(1)): the norms run on slices, the inputs of the
    column-parallel layers are all-gathered and the row-parallel outputs reduce-scattered.
    """
    stream = Shard(1) if sequence_parallel else Replicate()  # the residual stream's layout
    gathered = PrepareModuleInput(input_layouts=(stream,), desired_input_layouts=(Replicate(),))
    norm = SequenceParallel() if sequence_parallel else None  # None: the norm stays whole
    if _family(model) == "gpt2":
        plan = {
            "ln_1": norm, "attn.c_attn": gathered,
            "attn.c_attn.q": ColwiseParallel(), "attn.c_attn.k": ColwiseParallel(),
            "attn.c_attn.v": ColwiseParallel(),
            "attn.c_proj": RowwiseParallel(output_layouts=stream),
            "ln_2": norm, "mlp.c_fc": ColwiseParallel(input_layouts=stream),
            "mlp.c_proj": RowwiseParallel(output_layouts=stream),
        }
    else:
        plan = {
            "input_layernorm": norm,
            # Llama's decoder layer passes hidden_states to attention by keyword.
            "self_attn": PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": stream},
                desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=stream),
            "post_attention_layernorm": norm, "mlp": gathered,
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=stream),
        }
    return {name: style for name, style in plan.items() if style is not None}


def apply_tensor_parallel(
    model: nn.Module,
    mesh: DeviceMesh,
    plan: dict[str, ParallelStyle] | None = None,
    sequence_parallel: bool = False,
) -> nn.Module:
    """Split every block of a `build_model` model over the 1-D tensor-parallel `mesh` (for a
    2-D mesh, pass `mesh["tp"]`), in place. Embeddings, the final norm and the LM head stay
    whole on every rank. Returns the model."""
    tp = mesh.size()
    check_tensor_parallel(model_shape(model), tp)
    prepare_for_tensor_parallel(model)
    plan = plan or tensor_parallel_plan(model, sequence_parallel)
    for block in transformer_blocks(model):
        parallelize_module(block, mesh, plan)
        attn = getattr(block, "attn", None)
        if attn is not None:
            # GPT-2's attention splits c_attn's output by `split_size` and keeps head counts:
            # this rank now has heads / tp heads, d_model / tp wide.
            attn.num_heads //= tp
            attn.split_size //= tp
            attn.embed_dim //= tp
        # Llama's attention reshapes with -1 heads, so its local head count follows the weights.
    if sequence_parallel:
        parallelize_module(model, mesh, _sequence_slicing(model))
        # prepend: before the hook above that slices the positions and then communicates
        transformer_blocks(model)[0].register_forward_pre_hook(
            lambda block, args: check_sequence_split(args[0].shape[1], tp), prepend=True
        )
    return model


def check_sequence_split(seq_len: int, tp: int) -> None:
    """Sequence parallelism gives each of the `tp` ranks an equal slice of the positions: slices
    of unequal sizes would reach the collectives, which gloo aborts on (SIGABRT) and NCCL may
    hang on. Refuse them first, with the lengths that work."""
    if seq_len % tp:
        below, above = seq_len - seq_len % tp, seq_len - seq_len % tp + tp
        raise ValueError(
            f"sequence parallelism splits the {seq_len} positions of each sequence over {tp} "
            f"tensor-parallel ranks: use a sequence length that {tp} divides (e.g. {below} or "
            f"{above}), or sequence_parallel=False"
        )


def _sequence_slicing(model: nn.Module) -> dict[str, ParallelStyle]:
    """With sequence parallelism the first block takes this rank's slice of the positions
    (no communication: every rank has the whole embedding output) and the final norm gets the
    whole sequence back (an all-gather)."""
    # GPT-2 hands its blocks 4 positional arguments (the hidden states first), Llama 1.
    others = (None,) * 3 if _family(model) == "gpt2" else ()
    first = "transformer.h.0" if _family(model) == "gpt2" else "model.layers.0"
    final_norm = "transformer.ln_f" if _family(model) == "gpt2" else "model.norm"
    return {
        first: PrepareModuleInput(input_layouts=(Replicate(), *others),
                                  desired_input_layouts=(Shard(1), *others), use_local_output=True),
        final_norm: PrepareModuleInput(input_layouts=(Shard(1),),
                                       desired_input_layouts=(Replicate(),), use_local_output=True),
    }


def _family(model: nn.Module) -> str:
    family = getattr(getattr(model, "config", None), "model_type", "")
    if family not in ("gpt2", "llama"):
        raise TypeError(f"no tensor-parallel plan for a {family!r} model: use gpt2 or llama")
    return family


def local_parameter_bytes(model: nn.Module) -> int:
    """Bytes of the parameters this rank holds: its shards of split weights, whole replicated
    ones. Gradients and each optimizer state per parameter take the same again."""
    return sum((p.to_local() if isinstance(p, DTensor) else p).nbytes for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# Counting what tensor parallelism sends.


class CollectiveBytes(CommDebugMode):
    """CommDebugMode (it sees the collectives DTensor issues) that also adds up the bytes of the
    tensors each collective is given, by op name (e.g. "all_reduce")."""

    def __init__(self):
        super().__init__()
        self.bytes: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = sum(self.comm_counts.values())
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if out is not NotImplemented and sum(self.comm_counts.values()) > before:
            name = func._overloadpacket.__name__.removesuffix("_")
            nbytes = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
            self.bytes[name] = self.bytes.get(name, 0) + nbytes
        return out


_CONVERTED = re.compile(r"\.(attn\.c_attn\.[qkv]|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$")


def gpt2_layout(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Parameters of a `prepare_for_tensor_parallel` GPT-2 model in the original model's names
    and layout (Conv1D weights (in, out), one fused c_attn), to compare with an untouched one.
    Parameters of other models come back unchanged."""
    out = {}
    for name, value in params.items():
        out[name] = value.t() if _CONVERTED.search(name) else value
    for name in [n for n in out if ".c_attn.q." in n]:
        fused = name.replace(".c_attn.q.", ".c_attn.")
        parts = [out.pop(name.replace(".q.", f".{p}.")) for p in "qkv"]
        out[fused] = torch.cat(parts, dim=-1)  # (in, 3 * width) weight or (3 * width) bias
    return out
