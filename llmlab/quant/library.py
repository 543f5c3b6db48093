"""GPTQ by library: GPTQModel, the maintained successor of the archived auto-gptq, and
transformers' `GPTQConfig`, which runs GPTQModel through optimum. Both work offline here: the
course's own model folder in, a quantized checkpoint folder out.

GPTQModel prints a banner at import and logs (and draws progress bars) at INFO level on every
step; `quiet=True` keeps a notebook's output to what the course prints itself.

A checkpoint llmlab saves carries checksums.sha256 (the sha256 of each of its files), checked when
it is loaded, as checkpoints' are; one made elsewhere has none, and loads after structure checks
(its quantization config, the shapes and dtypes of each layer's tensors, g_idx in range).
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

from llmlab.device import choose_dtype
from llmlab.files import (
    FOLDER_CHECKSUMS,
    DamagedFile,
    atomic_folder,
    verify_folder,
    write_folder_checksums,
)
from llmlab.models.finite import require_finite
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
# GPTQModel's tokenizer helper (tokenicer) points these at /tmp/tokenicer_hf_home when they are
# unset, for the whole process and every process it starts: a download there would land in /tmp,
# not in the user's Hugging Face cache. Those it sets are unset again after the import.
HF_CACHE_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_MODULES_CACHE")
# Loggers of GPTQModel's dependencies that log at INFO/WARNING on every load.
NOISY_LOGGERS = ("tokenicer", "tokenicer.tokenicer", "accelerate.utils.modeling", "optimum")
REMEDY = ("Quantize the float model again (llmlab.quant.library.gptqmodel_quantize), or copy the "
          "checkpoint again from where it was made")
GPTQ_BITS = (2, 3, 4, 8)  # the widths GPTQ checkpoints pack into int32 words
# Each quantized layer's tensors and the dtypes GPTQ checkpoints store them in.
GPTQ_TENSORS = {"qweight": ("I32",), "qzeros": ("I32",), "scales": ("F16", "BF16", "F32"),
                "g_idx": ("I32",)}


def import_gptqmodel(quiet: bool = True):
    """The gptqmodel module, imported without its banner, or an error that says how to get it."""
    os.environ.setdefault(CPU_WORKERS_VARIABLE, str(os.cpu_count() or 1))
    os.environ.setdefault(*PACK_EXTENSION_OFF)
    unset = [name for name in HF_CACHE_VARIABLES if name not in os.environ]
    try:
        with _captured(quiet):
            import gptqmodel
    except ImportError as error:
        raise ImportError(
            "GPTQModel is not installed: it is one of the course's pinned packages, so run the "
            "README's install command (or `pip install -c constraints.txt gptqmodel`)"
        ) from error
    finally:
        for name in unset:
            os.environ.pop(name, None)
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
    copy.weight.data = require_finite(weight, "the weight to quantize").detach().float().clone()
    with _captured(True), _in_scratch_folder():
        config = QuantizeConfig(bits=bits, group_size=group_size, desc_act=act_order, sym=False)
        task = GPTQ(copy, config)
        task.quantizer.configure(perchannel=True)  # one grid per row (and group), as GPTQ does
        count = 0
        for x in inputs:
            require_finite(x, f"calibration input {count}")
            task.add_batch(x.detach().float().reshape(1, -1, x.shape[-1]), None)
            count += 1
        if not count:
            raise ValueError("GPTQ needs calibration inputs: got none")
        start = time.perf_counter()
        scales, zeros, *_ = task.hf_quantize(blocksize=block_size, percdamp=damp,
                                             group_size=group_size, actorder=act_order,
                                             act_group_aware=group_aware)
        seconds = time.perf_counter() - start
    return LibraryLayer(copy.weight.detach().clone(), scales, zeros, seconds)


# ----------------------------------------------------------------------- a whole model


def calibration_examples(batches: Iterable[torch.Tensor], window: int | None = None) -> list:
    """Token-id batches (batch, seq), checked as llmlab.quant.check_batches does (none, or
    shorter than `window`, is refused), as the list of {input_ids, attention_mask} rows that
    GPTQModel and transformers' GPTQConfig both take."""
    return [{"input_ids": ids[None, :window], "attention_mask": torch.ones_like(ids[None, :window])}
            for batch in check_batches(batches, window) for ids in batch]


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
        )
        # GPTQModel computes in bf16 on a CPU unless told otherwise. The course's dtype rule keeps
        # that where bf16 is native and gives fp32 where it is emulated (Lab 07's model: 91 s
        # against 3 s in bf16 on a CPU capped at AVX2).
        model = gptqmodel.GPTQModel.load(str(model_folder), config, device="cpu",
                                         dtype=choose_dtype("cpu").dtype)
        model.quantize(examples, batch_size=min(8, len(examples)))
        with atomic_folder(out_folder) as temporary:  # never half a checkpoint at out_folder
            model.save(str(temporary))
            write_folder_checksums(temporary)
    return Path(out_folder)


def check_gptq_checkpoint(folder: str | Path) -> dict:
    """The quantization settings a GPTQ checkpoint carries, or a clear error when it has none
    (its quantize_config.json lost, or a plain float model). Every config that holds them
    (config.json, quantize_config.json, which GPTQModel reads first) is checked, and the
    checkpoint's tensors against it (check_gptq_tensors): DamagedFile if anything is off."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} holds no model (no config.json)")
    sources = {"config.json": _read_json(folder, "config.json").get("quantization_config")}
    if (folder / "quantize_config.json").is_file():
        sources["quantize_config.json"] = _read_json(folder, "quantize_config.json")
    found = {source: settings for source, settings in sources.items() if settings}
    if not found:
        raise ValueError(
            f"{folder} has no quantization config (neither quantization_config in config.json "
            "nor quantize_config.json): without bits, group size and format its int4 tensors "
            "cannot be read. Copy the file back from where it was quantized, or load the float "
            "model it came from"
        )
    for source, settings in found.items():
        problem = _settings_problem(settings)
        if problem:
            raise DamagedFile(f"GPTQ checkpoint {folder}", source, problem, REMEDY)
        check_gptq_tensors(folder, settings["bits"], settings["group_size"])
    return next(iter(found.values()))


def _settings_problem(settings) -> str | None:
    """What is wrong with a checkpoint's quantization settings (bits, group size), or None."""
    if not isinstance(settings, dict):
        return "holds no JSON object of quantization settings"
    bits, group_size = settings.get("bits"), settings.get("group_size")
    if isinstance(bits, bool) or bits not in GPTQ_BITS:
        return f"gives bits {bits!r}, where GPTQ checkpoints have one of {GPTQ_BITS}"
    if isinstance(group_size, bool) or not isinstance(group_size, int) or not (
        group_size == -1 or group_size > 0
    ):
        return f"gives group_size {group_size!r}, where GPTQ has a positive size or -1 (none)"
    return None


def _read_json(folder: Path, name: str) -> dict:
    try:
        loaded = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DamagedFile(f"GPTQ checkpoint {folder}", name, f"cannot be read ({error})",
                          REMEDY) from None
    if not isinstance(loaded, dict):
        raise DamagedFile(f"GPTQ checkpoint {folder}", name, "holds no JSON object", REMEDY)
    return loaded


def check_gptq_tensors(folder: str | Path, bits: int, group_size: int) -> None:
    """Check every quantized layer of a GPTQ checkpoint's safetensors files: its qweight, qzeros,
    scales and g_idx are there, with GPTQ's dtypes and the shapes `bits` and `group_size` give,
    and g_idx names existing groups. DamagedFile otherwise (a truncated file included)."""
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt") as tensors:
                keys = set(tensors.keys())
                for layer in sorted(k.removesuffix(".qweight") for k in keys
                                    if k.endswith(".qweight")):
                    problem = _gptq_layer_problem(tensors, keys, layer, bits, group_size)
                    if problem:
                        raise DamagedFile(f"GPTQ checkpoint {folder}", path.name, problem, REMEDY)
        except SafetensorError as error:
            raise DamagedFile(f"GPTQ checkpoint {folder}", path.name,
                              f"cannot be read ({error})", REMEDY) from None


def _gptq_layer_problem(tensors, keys: set, layer: str, bits: int, group_size: int) -> str | None:
    """What is wrong with one layer's tensors in an open safetensors file, or None."""
    shapes = {}
    for kind, dtypes in GPTQ_TENSORS.items():
        if f"{layer}.{kind}" not in keys:
            return f"has no {layer}.{kind}"
        tensor = tensors.get_slice(f"{layer}.{kind}")
        if tensor.get_dtype() not in dtypes:
            return f"holds {layer}.{kind} as {tensor.get_dtype()}, where GPTQ has {dtypes[0]}"
        shapes[kind] = tuple(tensor.get_shape())
    in_features, out_features = shapes["g_idx"][0], shapes["scales"][-1]  # g_idx: a group a column
    groups = -(-in_features // group_size) if group_size > 0 else 1
    expected = {"qweight": (in_features * bits // 32, out_features),  # 32 // bits codes an int32
                "qzeros": (groups, out_features * bits // 32),
                "scales": (groups, out_features), "g_idx": (in_features,)}
    for kind, shape in expected.items():
        if shapes[kind] != shape:
            return (f"holds {layer}.{kind} of shape {shapes[kind]}, where {in_features} x "
                    f"{out_features} weights at the config's {bits} bits and group size "
                    f"{group_size} need {shape}")
    g_idx = tensors.get_tensor(f"{layer}.g_idx")
    if g_idx.numel() and (g_idx.min() < 0 or g_idx.max() >= groups):
        return (f"holds {layer}.g_idx with groups {int(g_idx.min())} to {int(g_idx.max())}, "
                f"where the layer has groups 0 to {groups - 1}")
    return None


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
    Linear layers are GPTQModel's quantized ones, computing in `dtype` (bf16 or fp16). Its files
    are checked first (their checksums if llmlab saved it, its config and tensors' shapes in any
    case): a damaged checkpoint gives DamagedFile, not wrong logits.

    Not float32 on a CPU: there GPTQModel 7.6 picks its fused kernel (TorchFusedLinear), whose
    outputs for asymmetric checkpoints are wrong (a relative logit error of 0.56 on a tiny
    GPT-2, where its bf16 and fp16 kernels and the reference GPTQ give 0.083)."""
    if dtype == torch.float32 and torch.device(device).type == "cpu":
        raise ValueError(
            "load GPTQ checkpoints in bf16 or fp16 on a CPU: GPTQModel's float32 CPU kernel "
            "gives wrong outputs for asymmetric checkpoints (llmlab.quant.library explains)"
        )
    if (Path(folder) / FOLDER_CHECKSUMS).is_file():  # saved by llmlab: every byte is checked
        verify_folder(folder, f"GPTQ checkpoint {folder}", REMEDY)
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
        )
        model = AutoModelForCausalLM.from_pretrained(
            model_folder, quantization_config=config, device_map="cpu", dtype=torch.float32
        )
        model.config.quantization_config.dataset = None  # the calibration tensors: not JSON
        with atomic_folder(out_folder) as temporary:  # never half a checkpoint at out_folder
            model.save_pretrained(temporary)
            write_folder_checksums(temporary)
    return Path(out_folder)
