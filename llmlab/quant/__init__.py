"""Quantization: int formats (symmetric/asymmetric, per tensor, channel or group), fp8, the NF4
codebook, quantization error, emulated fp8 training (scaling recipes, an fp8 linear layer),
round-to-nearest, reference GPTQ, size accounting, packed files, calibration capture, activation
outliers and LLM.int8(), whole-model quantization (RTN or GPTQ, block by block),
quantization-aware training (fake quantization with a straight-through gradient), adapters to
bitsandbytes (NF4, LLM.int8()) and torchao (int8), and QLoRA (a frozen NF4 base with trainable
LoRA adapters) with its measured memory, one table for quantized variants of a model
(perplexity, bits per weight, shipped size, latency), and post-training quantization against
quantization-aware training by perplexity. GPTQModel and transformers' GPTQConfig are in
llmlab.quant.library (imported on use: GPTQModel is heavy)."""

from llmlab.quant.bnb import int8_linear, nf4_bits_per_weight, nf4_model
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
from llmlab.quant.fp8 import (
    FP8Quantized,
    format_errors,
    fp8_fake_quantize,
    fp8_formats_table,
    fp8_quantize,
)
from llmlab.quant.fp8_training import FP8Linear, delayed_scale_cast, fp8_counts, fp8_training
from llmlab.quant.gptq import gptq, gptq_linear, hessian, inverse_hessian_factor
from llmlab.quant.model import ModelQuantization, quantize_model
from llmlab.quant.nf4 import nf4_codebook, nf4_dequantize, nf4_quantize
from llmlab.quant.outliers import (
    OUTLIER_THRESHOLD,
    feature_absmax,
    int8_matmul,
    llm_int8_matmul,
    matmul_errors,
    outlier_features,
)
from llmlab.quant.pack import load_packed, pack_codes, save_packed, unpack_codes
from llmlab.quant.ptq_against_qat import ptq_against_qat, qat_variants
from llmlab.quant.qat import finish_qat, prepare_qat, qat_layers
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
from llmlab.quant.torchao_int8 import int8_bits_per_weight, int8_model
from llmlab.quant.variants import (
    QuantRow,
    Variant,
    fake_quant_variant,
    float_variant,
    quant_rows,
    quant_table,
    torch_save_bytes,
)

__all__ = [
    "FP8Linear", "FP8Quantized", "ModelQuantization", "OUTLIER_THRESHOLD", "QLORA_BLOCKSIZE",
    "QLoRAMemory", "QuantError", "QuantRow", "Quantized", "Variant", "bits_per_weight",
    "check_batches", "check_bits", "code_range", "delayed_scale_cast", "fake_quant_variant",
    "fake_quantize", "feature_absmax", "find_layers", "finish_qat", "fit_grid", "float_variant",
    "format_errors", "fp8_counts", "fp8_fake_quantize", "fp8_formats_table", "fp8_quantize",
    "fp8_training", "gptq", "gptq_linear", "group_count", "hessian", "int8_bits_per_weight",
    "int8_linear", "int8_matmul", "int8_model", "inverse_hessian_factor", "llm_int8_matmul",
    "load_packed", "matmul_errors", "nf4_bits_per_weight", "nf4_codebook", "nf4_codes",
    "nf4_dequantize", "nf4_layers", "nf4_linear", "nf4_model", "nf4_quantize", "outlier_features",
    "pack_codes", "prepare_qat", "ptq_against_qat", "qat_layers", "qat_variants", "qlora_memory",
    "qlora_model", "quant_error", "quant_rows", "quant_state_bytes", "quant_table", "quantize",
    "quantize_model", "quantized_bits", "record_inputs", "rtn", "save_packed", "to_codes",
    "torch_save_bytes", "unpack_codes",
]
