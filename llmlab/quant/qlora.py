"""QLoRA: a frozen 4-bit NF4 base model with small trainable LoRA adapters beside it.

Every weight matrix of the transformer blocks is stored by bitsandbytes as NF4 codes in blocks of
64 weights, each block with its own scale, and those scales themselves quantized to 8 bits
("double quantization"), as in QLoRA (Dettmers et al. 2023). peft then puts a LoRA adapter on
each of these layers: y = W x + (alpha / rank) * B A x, with A (rank x in) and B (out x rank).

QLoRA is not quantization-aware training. The 4-bit base is frozen: its codes never change, and
in every forward pass each layer turns them back into 16/32-bit numbers just for the matmul. The
adapters are ordinary 16/32-bit weights and are the only thing the optimizer updates; nothing
ever learns to live with the rounding of a weight, because no weight that is rounded is trained.
(Quantization-aware training rounds the trained weights themselves in the forward pass, so the
model learns values that survive rounding.)

The layers are swapped to `bitsandbytes.nn.Linear4bit` here, directly, rather than through
`transformers`' `BitsAndBytesConfig` and `from_pretrained`: that path needs the model saved to
disk first, and a direct swap shows what changes. GPT-2's projections are `Conv1D` layers that
store their weight as (in, out); Linear4bit wants (out, in), so those are transposed once.
"""

import copy

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from llmlab.models import block_matrices

QLORA_BLOCKSIZE = 64  # weights per NF4 scale, as in QLoRA (Dettmers et al. 2023)


def nf4_linear(layer: nn.Module, compute_dtype: torch.dtype = torch.float32) -> nn.Module:
    """A frozen bitsandbytes NF4 copy of a Linear or GPT-2 Conv1D layer (the bias stays as is)."""
    from bitsandbytes.nn import Linear4bit, Params4bit  # optional: imported only when used

    weight = layer.weight.detach()
    if isinstance(layer, Conv1D):
        weight = weight.t()  # Conv1D keeps (in, out); Linear4bit quantizes (out, in)
    out_features, in_features = weight.shape
    quantized = Linear4bit(in_features, out_features, bias=layer.bias is not None,
                           compute_dtype=compute_dtype, compress_statistics=True,
                           quant_type="nf4", device="meta")
    quantized.weight = Params4bit(weight.contiguous(), requires_grad=False,
                                  blocksize=QLORA_BLOCKSIZE, compress_statistics=True,
                                  quant_type="nf4", module=quantized)
    if layer.bias is not None:
        quantized.bias = nn.Parameter(layer.bias.detach().clone(), requires_grad=False)
    # On CPUs with AVX512-BF16, bitsandbytes repacks the weights for an inference kernel whenever
    # the layer runs in eval mode without gradients (Trainer.evaluate): that rounds the scales to
    # bf16, undoes double quantization, and the next training step fails on the new layout.
    quantized.support_avx512bf16_for_cpu = False
    return quantized.to(weight.device)  # bitsandbytes quantizes when the weight is moved


def qlora_model(
    model: nn.Module,
    rank: int = 8,
    alpha: float = 16,
    dropout: float = 0.0,
    compute_dtype: torch.dtype = torch.float32,
):
    """A QLoRA copy of `model` (the model passed in is left as it was): every Linear/Conv1D
    weight of its transformer blocks becomes a frozen NF4 `Linear4bit`, with a trainable LoRA
    adapter of `rank` (scaled by alpha / rank) on each. Embeddings, norms and the LM head stay
    as they were, frozen. Returns a peft `PeftModel`; `compute_dtype` is the dtype the 4-bit
    weights are dequantized to for each matmul.
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be a positive integer (8 or 16 are usual), got {rank!r}")
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
    try:
        targets = block_matrices(model)
    except TypeError as error:  # transformer_blocks found no blocks: say it in QLoRA's words
        raise ValueError(
            f"found no transformer blocks in this {type(model).__name__}: qlora_model needs a "
            "GPT-2 or Llama model such as llmlab.models.build_model makes"
        ) from error
    if not targets:
        raise ValueError(
            f"this {type(model).__name__} has no Linear or Conv1D layers in its transformer "
            "blocks: there is nothing to store in 4 bits or to put adapters on"
        )
    try:  # optional dependencies (the "extras")
        import bitsandbytes  # noqa: F401
        from peft import LoraConfig, get_peft_model
    except ImportError as error:
        raise ImportError(
            "QLoRA needs peft and bitsandbytes: `pip install -c constraints.txt peft bitsandbytes`"
        ) from error

    model = copy.deepcopy(model)
    names = [name.removesuffix(".weight") for name in targets]
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, nf4_linear(getattr(parent, child), compute_dtype))
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=names,
                        bias="none")
    return get_peft_model(model, config)  # freezes every weight that is not an adapter


def nf4_layers(model: nn.Module) -> dict[str, nn.Module]:
    """{module name: Linear4bit} for every 4-bit layer of a model."""
    from bitsandbytes.nn import Linear4bit

    return {name: module for name, module in model.named_modules()
            if isinstance(module, Linear4bit)}


def nf4_codes(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every 4-bit layer's packed codes and 8-bit scales: compare two to see whether
    training changed the base (it must not)."""
    found = {}
    for name, layer in nf4_layers(model).items():
        found[f"{name}.codes"] = layer.weight.data.clone()
        found[f"{name}.scales"] = layer.weight.quant_state.absmax.clone()
    return found


def quant_state_bytes(model: nn.Module) -> int:
    """Bytes of the NF4 scales (absmax, their own 8-bit scales, the codebooks): bitsandbytes
    keeps them in a `QuantState` beside the weight, neither a parameter nor a buffer, so
    `MemoryTracker` does not see them. Tensors shared between layers count once."""
    storages = {}
    for layer in nf4_layers(model).values():
        state = layer.weight.quant_state
        for holder in (state, getattr(state, "state2", None)):
            for value in vars(holder).values() if holder is not None else ():
                if isinstance(value, torch.Tensor):
                    storage = value.untyped_storage()
                    storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())
