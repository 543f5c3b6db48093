"""Quantization: int formats (symmetric/asymmetric, per tensor, channel or group), the NF4
codebook, quantization error, round-to-nearest, reference GPTQ, size accounting, calibration
capture, whole-model quantization (RTN or GPTQ, block by block) and quantization-aware training
(fake quantization with a straight-through gradient)."""

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
from llmlab.quant.qat import finish_qat, prepare_qat, qat_layers
from llmlab.quant.rtn import rtn
from llmlab.quant.size import bits_per_weight, quantized_bits

__all__ = [
    "ModelQuantization", "QuantError", "Quantized", "bits_per_weight", "check_batches",
    "check_bits", "code_range", "fake_quantize", "find_layers", "finish_qat", "fit_grid", "gptq",
    "gptq_linear", "group_count", "hessian", "inverse_hessian_factor", "nf4_codebook",
    "nf4_dequantize", "nf4_quantize", "prepare_qat", "qat_layers", "quant_error", "quantize",
    "quantize_model", "quantized_bits", "record_inputs", "rtn", "to_codes",
]  # fmt: skip
