"""TensorRT through Torch-TensorRT: NVIDIA's inference compiler, for a CUDA GPU where it is
installed (the course does not install it: it needs CUDA and a matching TensorRT)."""

import importlib.util

import torch

from llmlab.inference.onnx_runtime import LogitsOnly


def tensorrt_unavailable() -> str | None:
    """Why TensorRT cannot run here, or None when it can."""
    if not torch.cuda.is_available():
        return "no CUDA GPU: TensorRT builds engines for NVIDIA GPUs only"
    if importlib.util.find_spec("torch_tensorrt") is None:
        return "torch_tensorrt is not installed (pip install torch-tensorrt, matching torch)"
    return None


def compile_tensorrt(model: torch.nn.Module, example_ids: torch.Tensor) -> torch.nn.Module:
    """The model (a transformers causal LM) compiled by Torch-TensorRT for ids of this shape, in
    fp16: a module from token ids to logits."""
    if reason := tensorrt_unavailable():
        raise RuntimeError(f"TensorRT cannot run here: {reason}")
    import torch_tensorrt

    module = LogitsOnly(model).eval().cuda()
    return torch_tensorrt.compile(module, ir="dynamo", inputs=[example_ids.cuda()],
                                  enabled_precisions={torch.float16})
