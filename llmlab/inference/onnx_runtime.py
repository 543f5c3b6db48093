"""A GPT-2 exported to ONNX (torch.onnx.export, the dynamo exporter) and run by ONNX Runtime on
the CPU, in float32 or with its weights quantized to int8 by ONNX Runtime.

An exported model is a graph and its weights in files, which an inference engine runs without
Python or PyTorch: ONNX Runtime here, TensorRT, or a phone's runtime. Its input is the token ids
(any batch, any length up to the context), its output the logits.
"""

import copy
from pathlib import Path

import torch
from torch import nn

from llmlab.files import atomic_folder

ONNX_FILE = "model.onnx"


class LogitsOnly(nn.Module):
    """The model as a function from token ids to logits (no cache, no dict: a graph's output is
    tensors)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).logits


def export_onnx(model: nn.Module, folder: str | Path, example_ids: torch.Tensor) -> Path:
    """Export the model (a transformers causal LM) to `folder`/model.onnx, its weights beside it;
    batch and length stay free (length up to the model's context). Returns the .onnx path."""
    if example_ids.dim() != 2 or example_ids.dtype != torch.long:
        raise ValueError(f"example_ids must be int64 token ids of shape (batch, length), got "
                         f"{example_ids.dtype} of shape {tuple(example_ids.shape)}")
    context = model.config.n_positions
    # Both sizes start at 2: the exporter treats an example dimension of 1 as fixed.
    if example_ids.shape[0] < 2 or not 2 <= example_ids.shape[1] <= context:
        raise ValueError(f"example_ids of shape {tuple(example_ids.shape)}: use a batch of at "
                         f"least 2 and a length from 2 to {context}, e.g. (2, 16)")
    dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("length", max=context)}
    folder = Path(folder)
    exported = LogitsOnly(copy.deepcopy(model).cpu()).eval()  # the caller's model stays as it is
    with atomic_folder(folder) as building:
        torch.onnx.export(exported, (example_ids.cpu(),),
                          building / ONNX_FILE, dynamo=True, input_names=["ids"],
                          output_names=["logits"], dynamic_shapes={"ids": dims},
                          verbose=False)
    return folder / ONNX_FILE


def ort_session(path: str | Path, threads: int | None = None):
    """An ONNX Runtime session on the CPU for the model at `path` (`threads`: intra-op threads,
    None for ONNX Runtime's choice)."""
    import onnxruntime

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no ONNX model at {path}: make one with export_onnx first")
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def ort_logits(session, ids: torch.Tensor) -> torch.Tensor:
    """The session's logits for int64 token ids (batch, length), as a torch tensor."""
    if ids.dim() != 2 or ids.dtype != torch.long:
        raise ValueError(f"ids must be int64 token ids of shape (batch, length), got "
                         f"{ids.dtype} of shape {tuple(ids.shape)}")
    return torch.from_numpy(session.run(["logits"], {"ids": ids.cpu().numpy()})[0])


def quantize_onnx_int8(path: str | Path, folder: str | Path) -> Path:
    """`folder`/model.onnx: the model at `path` with ONNX Runtime's dynamic int8 quantization:
    int8 weights (one scale per matrix), activations quantized per call from their own range."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path, folder = Path(path), Path(folder)
    if not path.is_file():
        raise FileNotFoundError(f"no ONNX model at {path}: make one with export_onnx first")
    with atomic_folder(folder) as building:
        quantize_dynamic(path, building / ONNX_FILE, weight_type=QuantType.QInt8)
    return folder / ONNX_FILE


def folder_bytes(path: str | Path) -> int:
    """Bytes of an exported model: its .onnx file and the weight files beside it."""
    return sum(file.stat().st_size for file in Path(path).parent.iterdir() if file.is_file())
