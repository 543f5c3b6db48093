"""Quantization: int formats (symmetric/asymmetric, per tensor, channel or group), the NF4
codebook, quantization error, round-to-nearest, reference GPTQ, size accounting, calibration
capture, whole-model quantization (RTN or GPTQ, block by block) and QLoRA (a frozen NF4 base
with trainable LoRA adapters) with its measured memory."""

from llmlab.quant.calibrate import check_batches, find_layers, record_inputs
from llmlab.quant.error import QuantError, quant_error
from llmlab.quant.formats import (
    Quantized,
    check_bits,
    code_range,
    fake_quantize,
    fit_grid,
    group_count,
    quantize,
    to_codes,
)
from llmlab.quant.gptq import gptq, gptq_linear, hessian, inverse_hessian_factor
from llmlab.quant.model import ModelQuantization, quantize_model
from llmlab.quant.nf4 import nf4_codebook, nf4_dequantize, nf4_quantize
from llmlab.quant.qlora import (
    QLORA_BLOCKSIZE,
    nf4_codes,
    nf4_layers,
    nf4_linear,
    qlora_model,
    quant_state_bytes,
)
from llmlab.quant.qlora_memory import QLoRAMemory, qlora_memory
from llmlab.quant.rtn import rtn
from llmlab.quant.size import bits_per_weight, quantized_bits

__all__ = [
    "QLORA_BLOCKSIZE", "ModelQuantization", "QLoRAMemory", "QuantError", "Quantized",
    "bits_per_weight", "check_batches", "check_bits", "code_range", "fake_quantize",
    "find_layers", "fit_grid", "gptq", "gptq_linear", "group_count", "hessian",
    "inverse_hessian_factor", "nf4_codebook", "nf4_codes", "nf4_dequantize", "nf4_layers",
    "nf4_linear", "nf4_quantize", "qlora_memory", "qlora_model", "quant_error",
    "quant_state_bytes", "quantize", "quantize_model", "quantized_bits", "record_inputs", "rtn",
    "to_codes",
]  # fmt: skip
