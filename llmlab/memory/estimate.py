"""How much memory a training step needs, by formula, itemised, per device.

Model states (weights, fp32 master weights, gradients, optimizer states) are bytes per parameter;
activations are bytes per token per layer; temporaries are the largest short-lived buffers. The
peak is not the sum of everything: gradients are freed between steps (`zero_grad`) and the
activations are gone by the optimizer step, so the peak is the largest of three moments:

- the start of the backward pass: states + all activations + the loss's gradient buffers;
- the end of the backward pass: states + all gradients + the first block's activations;
- the optimizer step: states + gradients + the optimizer's scratch buffer.

Context parallelism splits each sequence over `context_parallel` GPUs: each keeps the
activations of its share of the tokens (ring attention keeps only its own keys and values; the
others' come round again in the backward pass). Expert parallelism puts each of a mixture of
experts' experts on one of `expert_parallel` GPUs.

A pipeline stage (`pipeline_stage` of `pipeline_stages`, 1F1B) holds its blocks, the embeddings if
it is the first stage, the LM head and the loss if it is the last, and the activations of every
micro-batch it has begun and not finished; each micro-batch's backward runs alone.

Sizes are in bytes; "GB" in this course means 10^9 bytes, as in the papers it quotes.
"""

import dataclasses
import math
from dataclasses import dataclass

from llmlab.device import TORCH_DTYPES
from llmlab.memory.optimizers import OPTIMIZER_STATES
from llmlab.models import (
    ModelShape,
    as_shape,
    count_parameters,
    expert_parameters,
    stage_parameters,
)
from llmlab.tables import markdown_table
from llmlab.units import GB  # the one definition of the unit

DTYPE_BYTES = {name: dtype.itemsize for name, dtype in TORCH_DTYPES.items()}
# bitsandbytes' 8-bit Adam: one byte per state plus an fp32 scale per block of 256 values.
ADAM_8BIT_BYTES_PER_STATE = 1 + 4 / 256
# 4-bit weight formats, in bits per weight including their scales:
# NF4 with double quantization (QLoRA, Dettmers et al. 2023): 4 + 8/64 + 32/(64*256);
# GPTQ with groups of 128: 4 + (fp16 scale + 4-bit zero point) / 128.
WEIGHT_BITS_4BIT = {"nf4": 4 + 8 / 64 + 32 / (64 * 256), "gptq": 4 + (16 + 4) / 128}
# An assumption, not a formula: what the CUDA context and library workspaces (cuBLAS, cuDNN,
# NCCL) take outside PyTorch's allocator; typically 0.3-1 GB. `nvidia-smi` shows it, and
# `torch.cuda.memory_allocated` does not.
CUDA_CONTEXT_BYTES = 0.5 * GB


@dataclass(frozen=True)
class TrainingSetup:
    """How a model is trained: batch shape, precision, optimizer and how it is spread over GPUs.

    dtype is the compute precision. With bf16/fp16, `master_weights` keeps an fp32 copy of the
    weights for the update (mixed precision); False is pure 16-bit training. `fp32_grads` picks
    the convention: False is DeepSpeed/Megatron's 16-bit gradients (16 bytes per parameter with
    Adam, as in the ZeRO paper); True is torch.autocast's fp32 weights and gradients plus the
    16-bit weight copies it makes (18 bytes per parameter, as in Hugging Face's guide).
    `gpus` counts all GPUs; `tensor_parallel` of them split each layer, `context_parallel` each
    sequence; the rest replicate the model (data parallel). ZeRO `zero` stage 1-3 (FSDP's
    FULL_SHARD is stage 3) shards over all the GPUs holding the same weights, gpus /
    tensor_parallel: the context-parallel ones sum their gradients as data-parallel ones do
    (Megatron-LM's distributed optimizer shards over both). `expert_parallel` of those GPUs
    share a mixture of experts' experts, each holding n_experts / expert_parallel of them.
    These are a narrower view of a layout, all the memory model needs: the whole layout (with
    the pipeline degree) is llmlab.scale's `Parallel`, and llmlab.scale.layout.stage_setup gives
    the TrainingSetup of one of its pipeline stages.
    `lora_rank` > 0 trains low-rank adapters on every linear layer of the blocks and freezes the
    rest; `weights_4bit` ("nf4" or "gptq") then stores the frozen block weights in 4 bits (QLoRA).
    `head_only` trains the LM head alone (a tied head gets its own trainable copy) and freezes the
    rest: nothing below the head needs a gradient, so the blocks keep no activations.
    """

    batch: int = 1  # sequences per micro-batch, per data-parallel replica
    seq: int = 0  # tokens per sequence; 0 means the model's context length
    dtype: str = "bf16"
    optimizer: str = "adamw"
    fused_optimizer: bool = False  # e.g. AdamW(fused=True): one kernel, no scratch buffer
    master_weights: bool = True
    fp32_grads: bool = False
    checkpointing: bool = False  # keep only each block's input; recompute the rest in backward
    attention: str = "sdpa"  # "sdpa": a fused kernel; "eager": the seq x seq scores are kept
    grad_accumulation: int = 1  # micro-batches per optimizer step
    zero: int = 0
    gpus: int = 1
    tensor_parallel: int = 1
    context_parallel: int = 1
    expert_parallel: int = 1
    lora_rank: int = 0
    weights_4bit: str = ""
    head_only: bool = False
    # Tokens per sequence given logits, the last ones (transformers' logits_to_keep: a completion
    # after its prompt, in post-training); 0 means every token, as in pretraining.
    scored_tokens: int = 0
    # Muon's Newton-Schulz iteration: torch.optim.Muon's bf16, or fp32 where bf16 is emulated (a CPU
    # without bf16 instructions trains with llmlab.train.muon.FP32Muon: other temporaries).
    newton_schulz_dtype: str = "bf16"

    def __post_init__(self) -> None:
        for name in ("batch", "grad_accumulation", "gpus", "tensor_parallel", "context_parallel",
                     "expert_parallel"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("seq", "lora_rank", "scored_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {self.dtype!r}: use one of {tuple(DTYPE_BYTES)}")
        if self.optimizer not in OPTIMIZER_STATES:
            raise ValueError(
                f"unknown optimizer {self.optimizer!r}: use one of {tuple(OPTIMIZER_STATES)}"
            )
        if self.newton_schulz_dtype not in ("bf16", "fp32"):
            raise ValueError(f"unknown newton_schulz_dtype {self.newton_schulz_dtype!r}: use "
                             f"'bf16' (torch.optim.Muon) or 'fp32' (FP32Muon)")
        if self.attention not in ("sdpa", "eager"):
            raise ValueError(f"unknown attention {self.attention!r}: use 'sdpa' or 'eager'")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero must be a ZeRO stage 0, 1, 2 or 3, got {self.zero!r}")
        if self.gpus % (self.tensor_parallel * self.context_parallel):
            raise ValueError(
                f"gpus={self.gpus} is not a multiple of tensor_parallel x context_parallel = "
                f"{self.tensor_parallel} x {self.context_parallel}"
            )
        if self.weight_replicas % self.expert_parallel:
            raise ValueError(
                f"expert_parallel={self.expert_parallel} does not divide the {self.weight_replicas}"
                " GPUs that hold the same weights (gpus / tensor_parallel): the experts are "
                "shared out among those"
            )
        if self.weights_4bit and self.weights_4bit not in WEIGHT_BITS_4BIT:
            raise ValueError(
                f"unknown 4-bit format {self.weights_4bit!r}: use one of {tuple(WEIGHT_BITS_4BIT)}"
            )
        if self.weights_4bit and not self.lora_rank:
            raise ValueError("4-bit weights cannot be trained directly: set lora_rank (QLoRA)")
        if self.optimizer == "muon" and self.lora_rank:
            raise ValueError("Muon trains whole weight matrices, LoRA's adapters stay on AdamW "
                             "here: use optimizer='adamw' with lora_rank, or lora_rank=0")
        if self.head_only and self.lora_rank:
            raise ValueError("head_only trains the LM head alone: it cannot have LoRA adapters "
                             "too; set lora_rank=0")
        if self.fp32_grads and self.dtype != "fp32" and not self.master_weights:
            raise ValueError("fp32_grads describes mixed precision: it needs master_weights=True")

    @property
    def data_parallel(self) -> int:
        """Replicas that each take their own sequences."""
        return self.gpus // (self.tensor_parallel * self.context_parallel)

    @property
    def weight_replicas(self) -> int:
        """GPUs holding the same weights and summing their gradients: data- and
        context-parallel ones; what ZeRO shards over."""
        return self.gpus // self.tensor_parallel

    @property
    def mixed(self) -> bool:
        """16-bit compute with fp32 master weights."""
        return self.dtype != "fp32" and self.master_weights

    @property
    def autocast(self) -> bool:
        """torch.autocast: fp32 weights, 16-bit matmuls. What is not a matmul's output stays
        fp32: the residual stream, and the norms that read it."""
        return self.mixed and self.fp32_grads

    def replace(self, **changes) -> "TrainingSetup":
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """The set-up in words, for tables and the terminal."""
        if self.dtype == "fp32":
            precision = "fp32"
        elif not self.master_weights:
            precision = f"pure {self.dtype}"
        else:
            grads = "fp32 gradients (autocast)" if self.fp32_grads else f"{self.dtype} gradients"
            precision = f"{self.dtype} mixed precision, {grads}"
        optimizer = f"fused {self.optimizer}" if self.fused_optimizer else self.optimizer
        parts = [f"micro-batch {self.batch} x {self.seq or 'context'} tokens", precision,
                 optimizer, f"{self.attention} attention"]
        if self.grad_accumulation > 1:
            parts.append(f"{self.grad_accumulation} accumulation steps")
        if self.checkpointing:
            parts.append("activation checkpointing")
        if self.gpus > 1:
            parts.append(f"{self.gpus} GPUs" + (f", ZeRO-{self.zero}" if self.zero else ", DDP"))
        for name in ("tensor_parallel", "context_parallel", "expert_parallel"):
            if getattr(self, name) > 1:
                parts.append(f"{name.replace('_', ' ')} {getattr(self, name)}")
        if self.lora_rank:
            parts.append(f"LoRA rank {self.lora_rank}")
        if self.weights_4bit:
            parts.append(f"{self.weights_4bit} base weights")
        if self.head_only:
            parts.append("LM head only")
        return ", ".join(parts)


def _seq(shape: ModelShape, setup: TrainingSetup) -> int:
    """The setup's sequence length, or the model's context when it says 0."""
    return setup.seq or shape.context


def _local_seq(shape: ModelShape, setup: TrainingSetup) -> int:
    """Tokens of each sequence on one GPU: its share under context parallelism."""
    return _seq(shape, setup) // setup.context_parallel


def _scored(shape: ModelShape, setup: TrainingSetup) -> int:
    """Positions per sequence (per GPU) whose logits are computed: all, or the last
    `scored_tokens`."""
    return min(setup.scored_tokens or _local_seq(shape, setup), _local_seq(shape, setup))


def _state_bytes(setup: TrainingSetup) -> int:
    """Bytes of each fp32 master weight and optimizer state: fp32 unless training is pure 16-bit."""
    return 4 if setup.dtype == "fp32" or setup.mixed else DTYPE_BYTES[setup.dtype]


def model_states(
    params: float, setup: TrainingSetup, frozen_bytes: float = 0.0,
    muon_params: float | None = None, expert_params: float = 0.0,
) -> dict[str, float]:
    """Bytes per device of the weights, master weights, gradients and optimizer states of
    `params` trainable parameters (plus `frozen_bytes` of frozen weights, e.g. a LoRA base).
    With optimizer "muon", `muon_params` of them are the blocks' weight matrices, which Muon
    steps; AdamW steps the others. `expert_params` of them are a mixture of experts' experts.

    ZeRO (Rajbhandari et al. 2020) shards over the data-parallel GPUs: stage 1 the optimizer
    states (with the fp32 master weights), stage 2 also the gradients, stage 3 also the weights.
    Tensor parallelism splits every weight matrix, so all of it, over its GPUs. Expert
    parallelism gives each GPU 1/expert_parallel of the experts, with all their states.
    """
    if params < 0 or frozen_bytes < 0 or not 0 <= expert_params <= params:
        raise ValueError(f"need non-negative sizes, expert_params at most params, got {params=}, "
                         f"{frozen_bytes=} and {expert_params=}")
    compute = DTYPE_BYTES[setup.dtype]
    if setup.autocast:  # autocast: the fp32 weights are the master copy,
        weights, copies, master, grad_bytes = 4, compute, 0, 4  # and it makes 16-bit copies
    else:
        weights, copies, master, grad_bytes = compute, 0, 4 if setup.mixed else 0, compute
    per_state = ADAM_8BIT_BYTES_PER_STATE if setup.optimizer == "adam-8bit" else _state_bytes(setup)
    # States per parameter: Muon's count differs between matrices and the rest, but it trains
    # no mixture of experts (_check_model_fits_setup), so experts and others share one rate.
    states = _optimizer_state_count(params, setup.optimizer, muon_params) / params if params else 0

    def shard(per_parameter: float, from_stage: int) -> float:
        return _sharded(setup, (params - expert_params) * per_parameter,
                        expert_params * per_parameter, setup.zero >= from_stage)

    return {
        "weights": shard(weights, 3) + _sharded(setup, frozen_bytes, 0, setup.zero >= 3),
        "16-bit weight copies": shard(copies, 3),
        "master weights": shard(master, 1),
        "gradients": shard(grad_bytes, 2),
        "optimizer states": shard(states * per_state, 1),
    }


def _sharded(setup: TrainingSetup, dense_bytes: float, expert_bytes: float, zero: bool) -> float:
    """Bytes on one GPU of `dense_bytes` and `expert_bytes` held by the whole model: split by
    tensor parallelism, and over the weight replicas when ZeRO shards them (`zero`); experts are
    split by expert parallelism otherwise (ZeRO over the replicas covers the experts' split too:
    expert_parallel divides them)."""
    replicas = setup.weight_replicas if zero else 1
    experts_over = setup.weight_replicas if zero else setup.expert_parallel
    return (dense_bytes / replicas + expert_bytes / experts_over) / setup.tensor_parallel


def _optimizer_state_count(params: float, optimizer: str, muon_params: float | None) -> float:
    """How many states the optimizer keeps for `params` parameters: OPTIMIZER_STATES per
    parameter; Muon's one (its momentum) on its `muon_params` and AdamW's two on the others."""
    if optimizer != "muon":
        return OPTIMIZER_STATES[optimizer] * params
    if muon_params is None or not 0 <= muon_params <= params:
        raise ValueError(
            f"optimizer 'muon' keeps one state on each of the blocks' weight matrices and "
            f"AdamW's two on the other parameters: say how many of the {params:g} are the "
            f"blocks' matrices (muon_params, 0 to {params:g}), got {muon_params!r}"
        )
    return (OPTIMIZER_STATES["muon"] * muon_params
            + OPTIMIZER_STATES["adamw"] * (params - muon_params))


def block_linear_shapes(shape: ModelShape) -> list[tuple[int, int]]:
    """(in, out) of each weight matrix in one block: what LoRA adapts, 4-bit formats store and
    Muon steps (llmlab.models.block_matrices, by formula)."""
    d, f, kv = shape.d_model, shape.ff, shape.kv_dim
    if shape.family == "gpt2":
        return [(d, d + 2 * kv), (d, d), (d, f), (f, d)]
    return [(d, d), (d, kv), (d, kv), (d, d), (d, f), (d, f), (f, d)]


def block_matrix_parameters(shape: ModelShape, layers: int) -> int:
    """Parameters in the weight matrices of `layers` blocks."""
    return layers * sum(i * o for i, o in block_linear_shapes(shape))


def layer_activations(model: str | ModelShape, setup: TrainingSetup) -> dict[str, float]:
    """Bytes per token that one block keeps for the backward pass, itemised (whole layer, before
    tensor parallelism).

    What PyTorch saves: the input of every matmul (to get the weight's gradient), the inputs of
    norms and activation functions, and for eager attention the seq x seq softmax output per head.
    A fused kernel (sdpa, FlashAttention) keeps only q, k, v, its output and per-row statistics,
    and recomputes the scores in the backward pass. Dropout is off (it would add masks).

    Under torch.autocast the residual stream is fp32 (the embeddings are, and additions are not
    cast), so the norms keep fp32 tensors, and every matmul keeps its own 16-bit cast of its
    input: Llama's separate q, k and v projections keep three copies of one input, its gate and
    up projections two (GPT-2 fuses q, k, v into one matmul).

    A mixture of experts (transformers' Mixtral block, token by token through each expert) keeps
    the router's fp32 probabilities, and for each of the top_k experts a token goes to: its copy
    of the token, the SwiGLU's four tensors and the expert's output (to weight it).
    """
    shape = as_shape(model)
    seq = _seq(shape, setup)
    d, f, kv = shape.d_model, shape.ff, shape.kv_dim
    a = DTYPE_BYTES[setup.dtype]
    residual = 4 if setup.autocast else a  # the dtype of the stream between the blocks
    attention_inputs, mlp_inputs = 1, 1  # copies of each normalised input the matmuls keep
    if shape.family == "gpt2":
        norms = 2 * d * residual  # LayerNorm keeps its input (and two numbers per token)
        mlp = 2 * f * a  # GELU's input and the second matmul's input
    else:
        # transformers' RMSNorm is written in Python: it keeps an fp32 copy of its input and
        # the normalised result in the input's dtype (fp32 under autocast), two norms per block.
        norms = 2 * (4 * d + d * residual)
        mlp = 4 * f * a  # SwiGLU: gate output, SiLU of it, up output, their product
        if setup.autocast:
            attention_inputs, mlp_inputs = 3, 2
    # Eager attention repeats grouped k/v heads to every query head before its matmuls.
    k_and_v = 2 * (d if setup.attention == "eager" else kv)
    # GPT-2's q, k and v are strided views into one matmul's output; the fused kernels (on the
    # CPU and on CUDA) save contiguous copies of two of them: 2 d more per token (measured on
    # the CPU and on an H200: 0.60 GB for GPT-2 small's 8 x 1024 tokens in fp32).
    if shape.family == "gpt2" and setup.attention == "sdpa":
        k_and_v += 2 * d
    scores = 0
    if setup.attention == "eager":
        scores = shape.n_head * seq * a
        if shape.family == "llama" and a < 4:  # Llama's softmax runs (and is kept) in fp32,
            scores = shape.n_head * seq * (4 + a)  # then a 16-bit copy feeds the next matmul
    k = shape.active_experts
    items = {
        "norm inputs": norms,
        "attention input": attention_inputs * d * a,  # the normalised input of q, k, v
        "q, k, v": (d + k_and_v) * a,
        "attention scores": scores,
        "attention output": d * a,
        "MLP input": mlp_inputs * d * a,
        "router probabilities": shape.n_experts * 4,
        "expert inputs": k * d * a if shape.n_experts else 0,
        "MLP hidden": k * mlp,
        "expert outputs": k * d * a if shape.n_experts else 0,
    }
    return {name: nbytes for name, nbytes in items.items() if nbytes}


# The parts of a block that tensor parallelism splits; norms and the inputs to the first matmuls
# of attention and MLP are replicated (Korthikanti et al. 2022, without sequence parallelism).
TENSOR_PARALLEL_SPLIT = ("q, k, v", "attention scores", "attention output", "MLP hidden")


def block_activation_bytes(model: str | ModelShape, setup: TrainingSetup, layers: int = 0) -> float:
    """Bytes of activations that `layers` blocks (default: all) keep for the backward pass,
    per device. With checkpointing a block keeps only its input and recomputes the rest."""
    shape = as_shape(model)
    tp = setup.tensor_parallel
    per_token = sum(
        nbytes / tp if name in TENSOR_PARALLEL_SPLIT else nbytes
        for name, nbytes in layer_activations(shape, setup).items()
    )
    if setup.checkpointing:  # the block's input: the residual stream, fp32 under autocast
        per_token = shape.d_model * (4 if setup.autocast else DTYPE_BYTES[setup.dtype])
    return setup.batch * _local_seq(shape, setup) * (layers or shape.n_layer) * per_token


def head_activation_bytes(model: str | ModelShape, setup: TrainingSetup) -> float:
    """Bytes kept by the final norm, the LM head and the loss, per device.

    transformers computes the loss in fp32 whatever the dtype, and cross-entropy keeps the
    log-probabilities: vocabulary x 4 bytes per token, more than a small model's whole block.
    """
    shape = as_shape(model)
    d, a = shape.d_model, DTYPE_BYTES[setup.dtype]
    residual = 4 if setup.autocast else a  # see layer_activations
    final_norm = d * residual if shape.family == "gpt2" else 4 * d + d * residual
    if setup.head_only:  # the frozen final norm's input needs no gradient: it is not kept
        final_norm = 0
    # The final norm runs on every token; the head and the loss only on the scored ones (the
    # head's input, a slice, keeps the whole normalised output alive).
    log_probs = _scored(shape, setup) * shape.vocab_size * 4 / setup.tensor_parallel
    return setup.batch * (_local_seq(shape, setup) * (final_norm + d * a) + log_probs)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device, itemised; `peak_items` are the ones present at the peak."""

    shape: ModelShape
    setup: TrainingSetup
    items: dict[str, float]
    peak_phase: str
    peak_items: tuple[str, ...]
    overhead: float = CUDA_CONTEXT_BYTES
    pipeline_stage: int = 0  # which stage of the pipeline this is (from 0)
    pipeline_stages: int = 1

    @property
    def peak(self) -> float:
        """Peak bytes allocated by PyTorch (what torch.cuda.max_memory_allocated reports)."""
        return sum(self.items[name] for name in self.peak_items)

    @property
    def total(self) -> float:
        """The peak plus the CUDA context: about what nvidia-smi would show."""
        return self.peak + self.overhead

    def table(self) -> str:
        """The items as a text table, in GB, marking those present at the peak."""
        rows = [(name, nbytes, "yes" if name in self.peak_items else "")
                for name, nbytes in self.items.items()]
        rows += [(f"peak, at the {self.peak_phase}", self.peak, ""),
                 ("+ CUDA context (assumed)", self.overhead, ""),
                 ("total per GPU", self.total, "")]
        where = "per GPU"
        if self.pipeline_stages > 1:
            where += f", stage {self.pipeline_stage} of 0-{self.pipeline_stages - 1}"
        return markdown_table([{where: label, "GB": f"{nbytes / GB:.3f}", "at peak": mark}
                               for label, nbytes, mark in rows], aligned=True)


def _trainable_and_frozen(
    shape: ModelShape, setup: TrainingSetup, layers: int, first: bool, last: bool
) -> tuple[float, float]:
    """Trainable parameters and bytes of frozen weights (LoRA freezes the base model) of a
    stage of `layers` blocks (the first and last hold the embeddings and the head)."""
    total = stage_parameters(shape, layers, first, last)
    # torch.autocast computes in 16 bits from fp32 weights: the frozen ones stay fp32 too.
    base = 4 if setup.autocast else DTYPE_BYTES[setup.dtype]
    if setup.head_only:  # a tied head's trainable copy comes on top of the frozen embedding
        head = shape.vocab_size * shape.d_model
        return head, (total - (0 if shape.tied_embeddings else head)) * base
    if not setup.lora_rank:
        return total, 0.0
    in_blocks = block_matrix_parameters(shape, layers)
    adapters = layers * sum(setup.lora_rank * (i + o) for i, o in block_linear_shapes(shape))
    block_bytes = WEIGHT_BITS_4BIT[setup.weights_4bit] / 8 if setup.weights_4bit else base
    return adapters, (total - in_blocks) * base + in_blocks * block_bytes


def _frozen_weight_copies(
    shape: ModelShape, setup: TrainingSetup, layers: int, last: bool
) -> float:
    """LoRA under torch.autocast: the 16-bit copies of the frozen fp32 matrices that matmuls
    use, which backward keeps to pass the gradient on: the LM head (on the last stage), and the
    block matrices unless they are 4-bit (bitsandbytes dequantizes those per call, keeps none)."""
    if not (setup.lora_rank and setup.autocast):
        return 0.0
    matrices = shape.vocab_size * shape.d_model if last else 0
    if not setup.weights_4bit:
        matrices += block_matrix_parameters(shape, layers)
    shards = setup.tensor_parallel * (setup.weight_replicas if setup.zero == 3 else 1)
    return matrices * DTYPE_BYTES[setup.dtype] / shards  # sharded as the weights are


# Persistent through the whole step.
STATES = ("weights", "master weights", "optimizer states", "DDP gradient buckets")


def estimate_memory(
    model: str | ModelShape,
    setup: TrainingSetup | None = None,
    *,
    pipeline_stage: int = 0,
    pipeline_stages: int = 1,
    **changes,
) -> MemoryEstimate:
    """Itemised bytes per GPU of a training step: `estimate_memory("llama-7b", batch=8, zero=3,
    gpus=8)` or with a `TrainingSetup`; of one pipeline stage when `pipeline_stages` > 1. See
    the module docstring for the peak."""
    shape = as_shape(model)
    setup = (setup or TrainingSetup()).replace(**changes)
    _check_model_fits_setup(shape, setup)
    _check_pipeline(shape, pipeline_stage, pipeline_stages)
    if setup.head_only and pipeline_stages > 1:
        raise ValueError("head_only plans one device holding the whole model: use "
                         "pipeline_stages=1 (only the last stage would train anything)")
    first, last = pipeline_stage == 0, pipeline_stage == pipeline_stages - 1
    layers = math.ceil(shape.n_layer / pipeline_stages)  # the most blocks a stage holds
    # 1F1B: stage i starts the forwards of (stages - i) micro-batches before its first backward,
    # with as many micro-batches per step as stages, or more, to keep the bubble small.
    in_flight = pipeline_stages - pipeline_stage
    tokens = setup.batch * _local_seq(shape, setup)
    tp, replicas = setup.tensor_parallel, setup.weight_replicas
    trainable, frozen = _trainable_and_frozen(shape, setup, layers, first, last)
    # Muon's share: the blocks' weight matrices, trained unless the head alone is.
    on_muon = setup.optimizer == "muon" and not setup.head_only
    muon_params = block_matrix_parameters(shape, layers) if on_muon else 0
    experts = expert_parameters(shape, layers)
    items = model_states(trainable, setup, frozen, muon_params, experts)
    items["16-bit weight copies"] += _frozen_weight_copies(shape, setup, layers, last)
    if replicas > 1 and setup.zero <= 1:
        # DDP's reducer keeps its own flat copy of the gradients to all-reduce in buckets
        # (unless DistributedDataParallel(gradient_as_bucket_view=True)); PyTorch's ZeRO-1,
        # ZeroRedundancyOptimizer, runs on DDP and keeps it too.
        items["DDP gradient buckets"] = items["gradients"]
    # Training the head alone, nothing below it needs a gradient: no block keeps its activations.
    below_head = 0.0 if setup.head_only else 1.0
    items["block activations"] = below_head * in_flight * block_activation_bytes(
        shape, setup, layers
    )
    if last:  # the LM head and the loss run on the last stage, one micro-batch at a time
        items["head activations"] = head_activation_bytes(shape, setup)
        # The gradients of the fp32 log-probabilities and of the logits, as backward starts.
        items["loss buffers"] = 2 * setup.batch * _scored(shape, setup) * shape.vocab_size * 4 / tp
        if setup.autocast and setup.checkpointing and not setup.lora_rank:
            # The head is not checkpointed: its 16-bit weight copy stays for its backward.
            items["head weight copy"] = shape.vocab_size * shape.d_model * (
                DTYPE_BYTES[setup.dtype] / tp)
    # At the end of backward the first block's activations are still there (or recomputed).
    items["block in backward"] = below_head * block_activation_bytes(
        shape, setup.replace(checkpointing=False), layers=1
    )
    if setup.attention == "eager" and not setup.head_only:  # gradients of probabilities, scores
        softmax_bytes = 4 if shape.family == "llama" else DTYPE_BYTES[setup.dtype]
        items["attention backward"] = 2 * tokens * shape.n_head * _seq(shape, setup) * (
            softmax_bytes / tp)
    if replicas > 1 and setup.zero == 3:
        # ZeRO-3/FSDP gathers a whole block to compute it (the experts this GPU holds), and
        # prefetches the next one.
        block_experts = expert_parameters(shape, layers=1)
        block_others = count_parameters(shape).non_embedding / shape.n_layer - block_experts
        nbytes = DTYPE_BYTES[setup.dtype]
        items["gathered blocks"] = 2 * _sharded(setup, block_others * nbytes,
                                                block_experts * nbytes, zero=False)
    items["optimizer scratch"] = _optimizer_scratch(shape, setup, trainable, muon_params, experts)
    items = {name: nbytes for name, nbytes in items.items() if nbytes > 0}

    # Accumulating over micro-batches keeps the gradients alive through the next backward.
    held = ("gradients",) if setup.grad_accumulation > 1 else ()
    # Autograd keeps autocast's 16-bit weight copies for backward; checkpointing drops the
    # blocks' (they are made again when a block is recomputed), not the head's.
    copies = ("head weight copy",) if setup.checkpointing else ("16-bit weight copies",)
    phases = {
        "start of backward": (*STATES, *held, *copies, "block activations", "head activations",
                              "loss buffers", "gathered blocks"),
        "end of backward": (*STATES, "gradients", "block in backward", "attention backward",
                            "gathered blocks"),
        "optimizer step": (*STATES, "gradients", "optimizer scratch"),
    }
    present = {phase: tuple(n for n in names if n in items) for phase, names in phases.items()}
    peak_phase = max(present, key=lambda phase: sum(items[n] for n in present[phase]))
    return MemoryEstimate(shape, setup, items, peak_phase, present[peak_phase],
                          pipeline_stage=pipeline_stage, pipeline_stages=pipeline_stages)


def tensor_parallel_problem(model: str | ModelShape, tp: int) -> str:
    """Why tensor parallelism of degree `tp` cannot split this model, or "" when it can: each
    rank takes whole attention heads (and key/value heads) and an equal slice of the MLP."""
    shape = as_shape(model)
    if tp > shape.n_head:
        return (f"tensor parallel degree {tp} is more than the model's {shape.n_head} attention "
                "heads: each rank needs at least one whole head; lower tp or use data parallel")
    for what, count in (("attention heads", shape.n_head), ("key/value heads", shape.kv_heads),
                        ("MLP width d_ff", shape.ff)):
        if count % tp:
            return (f"tensor parallel degree {tp} does not divide the model's {count} {what}: "
                    f"pick a tp that divides {count}")
    return ""


def check_tensor_parallel(model: str | ModelShape, tp: int) -> None:
    """Raise tensor_parallel_problem's explanation, if there is one."""
    problem = tensor_parallel_problem(model, tp)
    if problem:
        raise ValueError(problem)


def model_setup_problem(model: str | ModelShape, setup: TrainingSetup) -> str:
    """Why `setup` makes no sense for this model (a LoRA rank above its matrices' sides, EP on a
    dense model, ...), or "" when it does."""
    try:
        _check_model_fits_setup(as_shape(model), setup)
    except ValueError as problem:
        return str(problem)
    return ""


def _check_model_fits_setup(shape: ModelShape, setup: TrainingSetup) -> None:
    """The numbers of the set-up that only make sense for some models."""
    if setup.seq > shape.context:
        raise ValueError(f"seq={setup.seq} is longer than the model's context {shape.context}")
    _check_context_parallel(shape, setup)
    _check_experts(shape, setup)
    check_tensor_parallel(shape, setup.tensor_parallel)
    # A rank-r adapter of an (in, out) matrix is full rank once r reaches min(in, out).
    smallest = min(min(matrix) for matrix in block_linear_shapes(shape))
    if setup.lora_rank > smallest:
        raise ValueError(f"lora_rank={setup.lora_rank} is more than {smallest}, the smallest "
                         "side of the model's adapted matrices: a LoRA update of that rank is "
                         "already a full one; use a rank such as 8-64")


def _check_context_parallel(shape: ModelShape, setup: TrainingSetup) -> None:
    cp = setup.context_parallel
    if cp == 1:
        return
    if _seq(shape, setup) % cp:
        raise ValueError(f"context_parallel={cp} does not divide the {_seq(shape, setup)}-token "
                         "sequence: each GPU takes an equal share; pick a seq it divides")
    if setup.attention == "eager":
        raise ValueError("context parallelism runs a fused attention kernel on each block of "
                         "keys (ring attention): use attention='sdpa'")
    if setup.scored_tokens:
        raise ValueError("scored_tokens plans post-training on one GPU's whole sequences: leave "
                         "context_parallel at 1")


def _check_experts(shape: ModelShape, setup: TrainingSetup) -> None:
    if not shape.n_experts:
        if setup.expert_parallel > 1:
            raise ValueError(f"expert_parallel={setup.expert_parallel} needs a mixture of "
                             "experts (a shape with n_experts): this model is dense")
        return
    if shape.n_experts % setup.expert_parallel:
        raise ValueError(f"expert_parallel={setup.expert_parallel} does not divide the model's "
                         f"{shape.n_experts} experts: each GPU holds an equal share of them")
    for name in ("lora_rank", "weights_4bit", "head_only"):
        if getattr(setup, name):
            raise ValueError(f"{name} is planned for dense models only: this model is a mixture "
                             "of experts; plan full training (leave it unset)")
    if setup.optimizer == "muon":
        raise ValueError("Muon is planned for dense models only: use optimizer='adamw' for a "
                         "mixture of experts")


def _check_pipeline(shape: ModelShape, stage: int, stages: int) -> None:
    if not isinstance(stages, int) or not 1 <= stages <= shape.n_layer:
        raise ValueError(f"pipeline_stages must be 1 to the model's {shape.n_layer} layers "
                         f"(every stage holds a block), got {stages!r}")
    if not isinstance(stage, int) or not 0 <= stage < stages:
        raise ValueError(f"pipeline_stage must be 0 to {stages - 1}, got {stage!r}")


def _optimizer_scratch(
    shape: ModelShape, setup: TrainingSetup, trainable: float, muon_params: float,
    experts: float = 0.0,
) -> float:
    """PyTorch's multi-tensor (foreach) Adam, its default on CUDA, computes sqrt(v) for all
    parameters at once: one buffer the size of the (local) optimizer states' dtype. Fused
    kernels (fused=True, the 8-bit optimizer) and SGD with momentum need none. Muon steps its
    matrices one at a time, then its AdamW the other parameters: the larger of the two."""
    adam = setup.optimizer in ("adam", "adamw", "muon") and not setup.fused_optimizer
    on_adam = (trainable - muon_params - experts) * _state_bytes(setup)
    adam_buffer = _sharded(setup, on_adam, experts * _state_bytes(setup),
                           setup.zero >= 1) if adam else 0.0
    if not muon_params:
        return adam_buffer
    return max(adam_buffer, _muon_temporaries(shape, setup))


def _muon_temporaries(shape: ModelShape, setup: TrainingSetup) -> float:
    """What Muon holds while it orthogonalises the largest matrix, rows <= cols (a tall one
    transposed): the update it mixes from gradient and momentum (in the states' dtype), then in
    torch.optim.Muon two bf16 iterates of Newton-Schulz (the old and the new) and two bf16
    rows x rows Gram matrices; in FP32Muon, at its peak (X <- a X + (...) X), four fp32 matrices
    (the iterate, a X, the product, their sum) and one fp32 Gram matrix. The whole matrix: Muon
    orthogonalises whole matrices (a sharded one is gathered)."""
    rows, cols = sorted(max(block_linear_shapes(shape), key=lambda io: io[0] * io[1]))
    if setup.newton_schulz_dtype == "fp32":
        return rows * cols * (_state_bytes(setup) + 4 * 4) + rows * rows * 4
    return rows * cols * (_state_bytes(setup) + 2 * 2) + 2 * rows * rows * 2


def bytes_per_parameter(setup: TrainingSetup) -> float:
    """Model-state bytes per parameter on one GPU: 16 for mixed-precision Adam without ZeRO,
    18 with fp32 gradients (their sum; the 16-bit copies are gone by the optimizer step)."""
    return sum(model_states(1, setup).values())
