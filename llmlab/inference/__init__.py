"""Inference: a KV cache for generation, export to ONNX and a run by ONNX Runtime, int8 for CPUs."""
