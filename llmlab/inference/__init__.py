"""Inference: GPT-2's forward written out with a pluggable attention and a KV cache, greedy
generation timed per token, export to ONNX and a run by ONNX Runtime (int8 for CPUs),
Torch-TensorRT where installed, and one table comparing the engines.

One concern per module:
- `kv_cache`: GPT-2's forward with the attention passed in: full recompute, or a KV cache.
- `generate`: greedy generation through it, one token at a time, and its timing per token.
- `onnx_runtime`: export to ONNX, a session of ONNX Runtime, its int8 quantization.
- `tensorrt`: Torch-TensorRT, where it is installed (imported on use).
- `engines`: the ways of running a model side by side: size, latency, agreement, perplexity.
"""

from llmlab.inference.engines import EngineRow, engine_rows, engine_table
from llmlab.inference.generate import Generation, GenerationTiming, greedy_generate, time_generation
from llmlab.inference.kv_cache import FullAttention, KVCache, decoder_forward
from llmlab.inference.onnx_runtime import (
    LogitsOnly,
    export_onnx,
    folder_bytes,
    ort_logits,
    ort_session,
    quantize_onnx_int8,
)
from llmlab.inference.tensorrt import compile_tensorrt, tensorrt_unavailable

__all__ = [
    "EngineRow", "FullAttention", "Generation", "GenerationTiming", "KVCache", "LogitsOnly",
    "compile_tensorrt", "decoder_forward", "engine_rows", "engine_table", "export_onnx",
    "folder_bytes", "greedy_generate", "ort_logits", "ort_session", "quantize_onnx_int8",
    "tensorrt_unavailable", "time_generation",
]
