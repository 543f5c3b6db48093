"""bitsandbytes, the library QLoRA and LLM.int8() ship in: NF4 weights (Linear4bit) for a whole
model, and one LLM.int8() layer (Linear8bitLt) to check the decomposition built by hand.

Both run on CPU in bitsandbytes 0.50. GPT-2's Conv1D layers are handled by transformers: loading
a saved copy with a BitsAndBytesConfig replaces every Linear and Conv1D of the blocks by a
Linear4bit (Conv1D's (in, out) weight transposed on the way) and keeps the LM head in float.
"""

import tempfile

import torch
from torch import nn

from llmlab.device import device_or_cpu


def nf4_model(
    model: nn.Module,
    compute_dtype: torch.dtype = torch.float32,
    double_quant: bool = True,
    device: str | torch.device | None = None,
) -> nn.Module:
    """A copy of a `transformers` model whose block matrices are bitsandbytes NF4 (Linear4bit:
    blocks of 64 weights, an absmax each, itself quantized to 8 bits when `double_quant`).
    Embeddings, norms and the LM head stay in float. The original model is left as it was."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=double_quant,
        bnb_4bit_compute_dtype=compute_dtype,
    )
    device = device_or_cpu(device, "bitsandbytes")
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        quantized = AutoModelForCausalLM.from_pretrained(
            folder, quantization_config=config, device_map=str(device)
        )
    return quantized.eval()


def nf4_bits_per_weight(model: nn.Module) -> float:
    """Bits per weight of the model's NF4 matrices, read from their quantization state: 4-bit
    codes, the absmax of each block (8-bit with double quantization, else 32) and, with double
    quantization, one fp32 absmax and offset per 256 of those. QLoRA's figure: 4.127.
    The two small codebooks per layer (16 and 256 values) are left out."""
    import bitsandbytes as bnb

    bits = weights = 0
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            state = module.weight.quant_state
            count = state.shape.numel()
            bits += count * 4 + state.absmax.numel() * state.absmax.element_size() * 8
            if state.nested:
                bits += state.state2.absmax.numel() * 32 + 32  # fp32 absmax each, fp32 offset
            weights += count
    if not weights:
        raise ValueError("this model has no bitsandbytes Linear4bit layers: make it with nf4_model")
    return bits / weights


def int8_linear(weight: torch.Tensor, threshold: float = 6.0) -> nn.Module:
    """bitsandbytes' LLM.int8() layer for a (out, in) weight, in eval mode: int8 weights with an
    absmax per output row, and input columns reaching `threshold` computed in float16.
    It quantizes from float16, so give it float16 inputs. (In training mode on CPU it takes
    another path, the weights dequantized and no int8 inputs at all.)"""
    import bitsandbytes as bnb

    out_features, in_features = weight.shape
    layer = bnb.nn.Linear8bitLt(
        in_features, out_features, bias=False, has_fp16_weights=False, threshold=threshold
    )
    layer.load_state_dict({"weight": weight.detach().half()})
    return layer.to("cpu").eval()  # moving it to a device is what quantizes the weight
