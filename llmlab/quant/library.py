"""GPTQ by library: GPTQModel, the maintained successor of the archived auto-gptq, and
transformers' `GPTQConfig`, which runs GPTQModel through optimum. Both work offline here: the
course's own model folder in, a quantized checkpoint folder out.

GPTQModel prints a banner at import and logs (and draws progress bars) at INFO level on every
step; `quiet=True` keeps a notebook's output to what the course prints itself.
"""

import contextlib
import io
import json
import logging
import os
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from llmlab.quant.calibrate import check_batches

# GPTQModel quantizes on the CPU with a pool of worker threads; one per core is its own advice.
# Read when gptqmodel is imported, so it is set first (a user's own value wins).
CPU_WORKERS_VARIABLE = "GPTQMODEL_CPU_WORKERS"
# Its fast int4 packer is a C++ extension compiled on first use (about 30 s, and a compiler
# needed); the Python packer takes a second on the course's models.
PACK_EXTENSION_OFF = ("GPTQMODEL_DISABLE_PACK_EXT", "1")
# Kernels by the name the course uses -> GPTQModel's BACKEND value. "torch" runs anywhere; the
# others are CUDA kernels (Marlin: Frantar et al. 2024; ExLlamaV2; Machete for Hopper; Triton).
KERNELS = {
    "auto": "auto",
    "torch": "gptq_torch",
    "marlin": "gptq_marlin",
    "exllama_v2": "gptq_exllama_v2",
    "machete": "gptq_machete",
    "triton": "gptq_triton",
}
GPU_ONLY_KERNELS = ("marlin", "exllama_v2", "machete", "triton")
# Loggers of GPTQModel's dependencies that log at INFO/WARNING on every load.
NOISY_LOGGERS = ("tokenicer", "tokenicer.tokenicer", "accelerate.utils.modeling", "optimum")


def import_gptqmodel(quiet: bool = True):
    """The gptqmodel module, imported without its banner, or an error that says how to get it."""
    os.environ.setdefault(CPU_WORKERS_VARIABLE, str(os.cpu_count() or 1))
    os.environ.setdefault(*PACK_EXTENSION_OFF)
    try:
        with _captured(quiet):
            import gptqmodel
    except ImportError as error:
        raise ImportError(
            "GPTQModel is not installed: it is one of the course's pinned packages, so run the "
            "README's install command (or `pip install -c constraints.txt gptqmodel`)"
        ) from error
    if quiet:
        _quiet_logs()
    return gptqmodel


def _quiet_logs() -> None:
    from logbar import LogBar  # GPTQModel's logger, a logging.Logger subclass

    LogBar.shared().setLevel(logging.WARNING)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def _in_scratch_folder() -> Iterator[None]:
    """Run in a temporary working folder: GPTQModel writes a log file per quantization into
    ./logs of whatever folder it runs in (the learner's labs/ folder); its output folder keeps
    the same figures (quant_log.csv). Paths must be absolute inside."""
    with tempfile.TemporaryDirectory() as folder, contextlib.chdir(folder):
        yield


@contextlib.contextmanager
def _captured(quiet: bool) -> Iterator[None]:
    """Swallow what the library prints (banners, progress bars) unless it fails: then the
    error carries the last lines, which usually say why."""
    if not quiet:
        yield
        return
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            yield
    except Exception as error:
        tail = "\n".join(buffer.getvalue().strip().splitlines()[-15:])
        if tail:
            error.add_note(f"GPTQModel's last output:\n{tail}")
        raise


# ------------------------------------------------------------------------ one layer


@dataclass
class LibraryLayer:
    """GPTQModel's result for one layer: the weight it computes with, and its time."""

    weight: torch.Tensor  # dequantized, (out, in) like nn.Linear
    scales: torch.Tensor
    zeros: torch.Tensor
    seconds: float  # the quantization itself, Hessian accumulation excluded


def library_gptq_layer(
    weight: torch.Tensor,
    inputs: Iterable[torch.Tensor],
    bits: int = 4,
    group_size: int = 128,
    damp: float = 0.01,
    act_order: bool = False,
    block_size: int = 128,
    group_aware: bool = False,
) -> LibraryLayer:
    """GPTQModel's GPTQ of a copy of a (out, in) weight, from the layer's calibration inputs
    (..., in): the settings of llmlab.quant.gptq (asymmetric, a min/max grid per group), so the
    two compare layer by layer. The weight itself is left unchanged. `group_aware` turns on
    GPTQModel's default extra, group-aware reordering (GAR: Gafni et al. 2025), which the
    reference does not have: inside each group the columns go in order of their activity."""
    import_gptqmodel()
    from gptqmodel import QuantizeConfig
    from gptqmodel.quantization.gptq import GPTQ

    copy = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    copy.weight.data = weight.detach().float().clone()
    with _captured(True), _in_scratch_folder():
        config = QuantizeConfig(bits=bits, group_size=group_size, desc_act=act_order, sym=False)
        task = GPTQ(copy, config)
        task.quantizer.configure(perchannel=True)  # one grid per row (and group), as GPTQ does
        count = 0
        for x in inputs:
            task.add_batch(x.detach().float().reshape(1, -1, x.shape[-1]), None)
            count += 1
        if not count:
            raise ValueError("GPTQ needs calibration inputs: got none")
        start = time.perf_counter()
        scales, zeros, *_ = task.hf_quantize(blocksize=block_size, percdamp=damp,
                                             group_size=group_size, actorder=act_order,
                                             act_group_aware=group_aware)  # fmt: skip
        seconds = time.perf_counter() - start
    return LibraryLayer(copy.weight.detach().clone(), scales, zeros, seconds)


# ----------------------------------------------------------------------- a whole model


def calibration_examples(batches: Iterable[torch.Tensor], window: int | None = None) -> list:
    """Token-id batches (batch, seq), checked as llmlab.quant.check_batches does (none, or
    shorter than `window`, is refused), as the list of {input_ids, attention_mask} rows that
    GPTQModel and transformers' GPTQConfig both take."""
    return [{"input_ids": ids[None, :window], "attention_mask": torch.ones_like(ids[None, :window])}
            for batch in check_batches(batches, window) for ids in batch]  # fmt: skip


def gptqmodel_quantize(
    model_folder: str | Path,
    out_folder: str | Path,
    batches: Iterable[torch.Tensor],
    bits: int = 4,
    group_size: int = 128,
    act_order: bool = False,
    damp: float = 0.01,
    group_aware: bool = False,
    window: int | None = None,
    quiet: bool = True,
) -> Path:
    """Quantize a saved model (a Hugging Face folder) with GPTQModel and save the quantized
    checkpoint in `out_folder` (GPTQ format: packed int4 codes, fp16 scales, packed zeros, and
    quantize_config.json). Returns `out_folder`. The defaults are llmlab.quant.gptq's, so the
    two compare on equal settings; GPTQModel's own are damp 0.05 and group-aware reordering on
    (see library_gptq_layer)."""
    gptqmodel = import_gptqmodel(quiet)
    examples = calibration_examples(batches, window)
    model_folder, out_folder = Path(model_folder).absolute(), Path(out_folder).absolute()
    with _captured(quiet), _in_scratch_folder():
        config = gptqmodel.QuantizeConfig(
            bits=bits, group_size=group_size, desc_act=act_order, sym=False, damp_percent=damp,
            act_group_aware=group_aware,
        )  # fmt: skip
        model = gptqmodel.GPTQModel.load(str(model_folder), config, device="cpu")
        model.quantize(examples, batch_size=min(8, len(examples)))
        model.save(str(out_folder))
    return Path(out_folder)


def check_gptq_checkpoint(folder: str | Path) -> dict:
    """The quantization settings a GPTQ checkpoint carries, or a clear error when it has none
    (its quantize_config.json lost, or a plain float model)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} holds no model (no config.json)")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    settings = config.get("quantization_config")
    if settings is None and (folder / "quantize_config.json").is_file():
        settings = json.loads((folder / "quantize_config.json").read_text(encoding="utf-8"))
    if not settings:
        raise ValueError(
            f"{folder} has no quantization config (neither quantization_config in config.json "
            "nor quantize_config.json): without bits, group size and format its int4 tensors "
            "cannot be read. Copy the file back from where it was quantized, or load the float "
            "model it came from"
        )
    return settings


def pick_kernel(kernel: str) -> str:
    """GPTQModel's BACKEND value for a kernel name; a CUDA-only kernel on a machine without a
    GPU falls back to GPTQModel's own choice among the CPU kernels, with a warning."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown GPTQ kernel {kernel!r}: use one of {tuple(KERNELS)}")
    if kernel in GPU_ONLY_KERNELS and not torch.cuda.is_available():
        warnings.warn(
            f"the {kernel} kernel needs a CUDA GPU and there is none here: letting GPTQModel "
            "pick a CPU kernel instead (same numbers, slower)",
            stacklevel=3,
        )
        kernel = "auto"
    return KERNELS[kernel]


def load_gptq_checkpoint(
    folder: str | Path,
    kernel: str = "auto",
    device: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    quiet: bool = True,
) -> nn.Module:
    """A GPTQ checkpoint loaded for inference through GPTQModel: the transformers model whose
    Linear layers are GPTQModel's quantized ones, computing in `dtype` (bf16 or fp16).

    Not float32 on a CPU: there GPTQModel 7.6 picks its fused kernel (TorchFusedLinear), whose
    outputs for asymmetric checkpoints are wrong (a relative logit error of 0.56 on a tiny
    GPT-2, where its bf16 and fp16 kernels and the reference GPTQ give 0.083)."""
    if dtype == torch.float32 and torch.device(device).type == "cpu":
        raise ValueError(
            "load GPTQ checkpoints in bf16 or fp16 on a CPU: GPTQModel's float32 CPU kernel "
            "gives wrong outputs for asymmetric checkpoints (llmlab.quant.library explains)"
        )
    check_gptq_checkpoint(folder)
    gptqmodel = import_gptqmodel(quiet)
    backend = gptqmodel.BACKEND(pick_kernel(kernel))
    with _captured(quiet):
        loaded = gptqmodel.GPTQModel.load(str(folder), device=device, backend=backend, dtype=dtype)
    return loaded.model


def checkpoint_bits_per_weight(folder: str | Path) -> float:
    """Bits per weight of a GPTQ checkpoint's quantized matrices, read from its files: the packed
    codes, the scales, the packed zero points and the g_idx (each input column's group, int32;
    a GPTQ checkpoint stores it even without act-order), over the weights they stand for."""
    from safetensors import safe_open

    bits = check_gptq_checkpoint(folder)["bits"]
    stored = weights = 0
    for path in Path(folder).glob("*.safetensors"):
        with safe_open(str(path), "pt") as tensors:
            for key in tensors.keys():  # noqa: SIM118 (safe_open is not a dict)
                prefix, _, kind = key.rpartition(".")
                if kind not in ("qweight", "qzeros", "scales", "g_idx"):
                    continue
                tensor = tensors.get_tensor(key)
                stored += tensor.numel() * tensor.element_size() * 8
                if kind == "qweight":  # int32 words, 32 // bits codes in each
                    weights += tensor.numel() * 32 // bits
    if not weights:
        raise ValueError(f"{folder} holds no GPTQ tensors (qweight): is it a GPTQ checkpoint?")
    return stored / weights


def kernel_names(model: nn.Module) -> list[str]:
    """The classes of the quantized layers in a loaded model: which kernel computes them."""
    return sorted({type(m).__name__ for m in model.modules() if hasattr(m, "qweight")})


# ------------------------------------------------------------------------- transformers


@contextlib.contextmanager
def _no_optimum_progress_bars(quiet: bool) -> Iterator[None]:
    """optimum draws its GPTQ progress with tqdm.auto, which in a notebook is a widget that no
    redirect catches: while quiet, its loops run without one."""
    if not quiet:
        yield
        return
    from unittest import mock

    with mock.patch("optimum.gptq.quantizer.tqdm", lambda iterable, **_: iterable):
        yield


def transformers_gptq_quantize(
    model_folder: str | Path,
    out_folder: str | Path,
    batches: Iterable[torch.Tensor],
    bits: int = 4,
    group_size: int = 128,
    damp: float = 0.01,
    group_aware: bool = False,
    window: int | None = None,
    quiet: bool = True,
) -> Path:
    """The same through transformers: `from_pretrained(..., quantization_config=GPTQConfig(...))`
    quantizes while loading (optimum drives GPTQModel), then `save_pretrained`. The defaults
    are gptqmodel_quantize's; GPTQConfig's own are symmetric grids, damp 0.1 and GAR on."""
    from transformers import AutoModelForCausalLM, GPTQConfig

    import_gptqmodel(quiet)
    examples = calibration_examples(batches, window)
    model_folder, out_folder = Path(model_folder).absolute(), Path(out_folder).absolute()
    with _captured(quiet), _no_optimum_progress_bars(quiet), _in_scratch_folder():
        config = GPTQConfig(
            bits=bits, group_size=group_size, dataset=examples, sym=False, desc_act=False,
            damp_percent=damp, act_group_aware=group_aware,
        )  # fmt: skip
        model = AutoModelForCausalLM.from_pretrained(
            model_folder, quantization_config=config, device_map="cpu", dtype=torch.float32
        )
        model.config.quantization_config.dataset = None  # the calibration tensors: not JSON
        model.save_pretrained(out_folder)
    return Path(out_folder)
