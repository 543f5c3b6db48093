"""Parameter and FLOP counts: by formula from a shape, and from a built model to check them.

Conventions (stated once, used everywhere):
- Tied embeddings are one matrix: counted once (PyTorch's `parameters()` also yields it once).
- "Embedding" parameters are the vocabulary and position matrices (and an untied LM head);
  everything else, norms included, is "non-embedding" (Kaplan et al. 2020's N).
- A mixture of experts has every expert's parameters in its total, and each token runs through
  top_k of them: its *active* parameters (`count_active_parameters`) count those top_k experts,
  and its training FLOPs are the active ones' (Mixtral: 46.7B in total, 12.9B active).
- Training FLOPs per token = 6 x (active non-embedding params) + 6 x d_model x vocab (the LM head
  is a matmul even when its weights are tied) + 12 x n_layer x seq x d_model for the attention
  scores.
  6 = 2 (multiply-add) x 3 (forward, then backward for inputs and for weights). The attention
  term counts both matmuls (Q K^T and scores x V) over the full seq x seq square, as eager
  attention and FlopCounterMode do (PaLM, Chowdhery et al. 2022, appendix B); Kaplan et al. write
  6 x n_layer x seq x d_model, half of it, and a causal flash kernel indeed skips about half.
"""

import re
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from llmlab.models.presets import ModelShape, as_shape


@dataclass(frozen=True)
class ParamCounts:
    total: int
    embedding: int
    non_embedding: int


def block_parameters(shape: ModelShape, active: bool = False) -> int:
    """Parameters of one transformer block, from its shape alone; with `active`, only those one
    token uses (of a mixture of experts, the router and top_k experts)."""
    d, f, kv = shape.d_model, shape.ff, shape.kv_dim
    if shape.family == "gpt2":
        attention = d * (d + 2 * kv) + (d + 2 * kv) + d * d + d  # fused q,k,v and output, biases
        mlp = d * f + f + f * d + d
        norms = 2 * 2 * d  # two LayerNorms, each a scale and a shift
    else:
        attention = d * d + 2 * d * kv + d * d  # q, k, v, output projections; no biases
        experts = shape.active_experts if active else shape.experts
        mlp = experts * _swiglu_parameters(shape)
        mlp += d * shape.n_experts  # the router: one logit per expert (none when dense)
        norms = 2 * d  # two RMSNorms, a scale each
    return attention + mlp + norms


def count_parameters(model: str | ModelShape) -> ParamCounts:
    """Total, embedding and non-embedding parameters of a shape, by formula."""
    return _counts(as_shape(model), active=False)


def count_active_parameters(model: str | ModelShape) -> ParamCounts:
    """The parameters one token uses: count_parameters' of a dense model; of a mixture of
    experts, the router and top_k experts of each block in place of all its experts."""
    return _counts(as_shape(model), active=True)


def expert_parameters(model: str | ModelShape, layers: int = 0) -> int:
    """Parameters of the experts of `layers` blocks (default: all): what expert parallelism
    shards. 0 for a dense model."""
    shape = as_shape(model)
    if not shape.n_experts:
        return 0
    return (layers or shape.n_layer) * shape.n_experts * _swiglu_parameters(shape)


def _swiglu_parameters(shape: ModelShape) -> int:
    """One SwiGLU MLP (a llama block's, or one expert's): gate, up and down projections."""
    return 3 * shape.d_model * shape.ff


def _counts(shape: ModelShape, active: bool) -> ParamCounts:
    embedding = _input_embeddings(shape)
    if not shape.tied_embeddings:
        embedding += shape.vocab_size * shape.d_model  # a separate LM head matrix
    non_embedding = shape.n_layer * block_parameters(shape, active) + _final_norm(shape)
    return ParamCounts(embedding + non_embedding, embedding, non_embedding)


def stage_parameters(model: str | ModelShape, layers: int, first: bool, last: bool) -> int:
    """Parameters one pipeline stage holds: its `layers` blocks, the embeddings on the first
    stage, the final norm and the LM head on the last. A tied head gets its own copy on the last
    stage of a longer pipeline (Megatron-LM keeps one there and sums the two copies' gradients)."""
    shape = as_shape(model)
    total = layers * block_parameters(shape)
    if first:
        total += _input_embeddings(shape)
    if last:
        total += _final_norm(shape)
        if not (first and shape.tied_embeddings):  # one stage holds a tied matrix once
            total += shape.vocab_size * shape.d_model
    return total


def _input_embeddings(shape: ModelShape) -> int:
    """The token embeddings, and GPT-2's learned position embeddings."""
    positions = shape.context if shape.family == "gpt2" else 0
    return (shape.vocab_size + positions) * shape.d_model


def _final_norm(shape: ModelShape) -> int:
    return 2 * shape.d_model if shape.family == "gpt2" else shape.d_model  # LayerNorm: + a shift


def count_model_parameters(model: nn.Module) -> ParamCounts:
    """The same counts, read off a built model (shared parameters counted once)."""
    vocabulary = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]
    head = model.get_output_embeddings()
    if head is not None and all(head.weight is not w for w in vocabulary):
        vocabulary.append(head.weight)  # an untied LM head is a vocabulary matrix too
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(w.numel() for w in vocabulary)
    return ParamCounts(total, embedding, total - embedding)


def parameter_table(model: nn.Module) -> dict[str, int]:
    """Parameters per module, with the layer index replaced by "*" (summed over the layers).

    "transformer.h.*.attn.c_attn" is the q/k/v projection of all blocks together.
    """
    table: dict[str, int] = {}
    for name, parameter in model.named_parameters():  # yields a tied matrix once
        module = re.sub(r"\.\d+\.", ".*.", name.rsplit(".", 1)[0])
        table[module] = table.get(module, 0) + parameter.numel()
    return table


@dataclass(frozen=True)
class FlopCounts:
    """Training FLOPs per token, itemised (see the module docstring for the convention)."""

    blocks: int  # 6 x non-embedding parameters
    lm_head: int  # 6 x d_model x vocab
    attention: int  # 12 x n_layer x seq x d_model

    @property
    def total(self) -> int:
        return self.blocks + self.lm_head + self.attention


def training_flops_per_token(model: str | ModelShape, seq: int) -> FlopCounts:
    """FLOPs to train on one token of a `seq`-long sequence (forward + backward)."""
    shape = as_shape(model)
    if seq <= 0:
        raise ValueError(f"seq must be a positive number of tokens, got {seq}")
    n = count_active_parameters(shape).non_embedding
    return FlopCounts(
        blocks=6 * n,
        lm_head=6 * shape.d_model * shape.vocab_size,
        attention=12 * shape.n_layer * seq * shape.d_model,
    )


def measure_training_flops(model: nn.Module, input_ids: torch.Tensor) -> int:
    """FLOPs of one forward + backward, counted by PyTorch's FlopCounterMode.

    FlopCounterMode counts matmuls (and convolutions, and the attention kernels it knows); it
    ignores element-wise work such as norms, softmax and the optimizer, which are a few percent.
    """
    counter = FlopCounterMode(display=False)
    with counter:
        model(input_ids=input_ids, labels=input_ids).loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()
