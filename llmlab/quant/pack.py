"""What a quantized model would ship: int codes packed several to a byte (two 4-bit codes per
byte), fp16 scales, packed zero points and the float rest, in one safetensors file. A
fake-quantized model holds float weights in memory, so its own save_pretrained would be as large
as the original; the size of this file is the size the quantization really buys. Its sha256 is
recorded beside it (`model.safetensors.sha256`) and checked on load, as checkpoints' are.
"""

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from llmlab.files import (
    DamagedFile,
    atomic_file,
    checksums_beside,
    verify_checksums,
    write_checksums,
)
from llmlab.models.finite import require_finite
from llmlab.quant.formats import Quantized, code_range
from llmlab.quant.model import ModelQuantization

PACKABLE_BITS = (2, 4, 8)  # widths that fill a byte exactly
REMEDY = "Save it again from the quantized model with llmlab.quant.save_packed"


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 bytes holding 8 // bits unsigned codes (0 .. 2^bits - 1) each, along the last
    dimension, the first code in the lowest bits; a short last byte is padded with zeros."""
    if bits not in PACKABLE_BITS:
        raise ValueError(
            f"{bits}-bit codes do not fill whole bytes: this packer takes {PACKABLE_BITS} "
            "(GPTQ checkpoints pack 3-bit codes across 32-bit words instead)"
        )
    if codes.numel() and (codes.min() < 0 or codes.max() >= 2**bits):
        raise ValueError(f"codes must be from 0 to {2**bits - 1} to pack them in {bits} bits")
    per_byte = 8 // bits
    pad = -codes.shape[-1] % per_byte
    codes = nn.functional.pad(codes.to(torch.uint8), (0, pad))
    grouped = codes.view(*codes.shape[:-1], -1, per_byte).to(torch.int32)
    shifts = torch.arange(per_byte, dtype=torch.int32) * bits
    return (grouped << shifts).sum(-1).to(torch.uint8)


def unpack_codes(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """The first `count` codes of each row of `packed` (pack_codes' inverse), as uint8."""
    per_byte = 8 // bits
    shifts = torch.arange(per_byte, dtype=torch.int32) * bits
    codes = (packed.to(torch.int32)[..., None] >> shifts) & (2**bits - 1)
    return codes.flatten(-2)[..., :count].to(torch.uint8)


def save_packed(model: nn.Module, report: ModelQuantization, path: str | Path) -> Path:
    """Write the quantized layers of `report` packed (codes, fp16 scales, zeros) and every other
    parameter of `model` in fp16 to one safetensors file; return its path."""
    quantized = {f"{name}.weight" for name in report.layers}
    # every float parameter is checked before anything is written; a tied matrix is yielded once
    floats = {name: require_finite(parameter.detach(), f"parameter {name}")
              for name, parameter in model.named_parameters() if name not in quantized}
    tensors, layouts = {}, {}
    for name, q in report.layers.items():
        low, _ = code_range(q.bits, q.symmetric)
        tensors[f"{name}.qweight"] = pack_codes(q.codes.to(torch.int16) - low, q.bits)
        tensors[f"{name}.scales"] = q.scales.half().contiguous()
        if not q.symmetric:  # a symmetric grid's zero point is 0 by construction
            tensors[f"{name}.qzeros"] = pack_codes(q.zeros.to(torch.uint8), q.bits)
        layouts[name] = {"bits": q.bits, "symmetric": q.symmetric, "group_size": q.group_size,
                         "in_features": q.codes.shape[1]}
    for name, parameter in floats.items():
        tensors[name] = parameter.half().contiguous()
    path = Path(path)
    with atomic_file(path) as tmp:
        save_file(tensors, tmp, metadata={"quantized_layers": json.dumps(layouts)})
    write_checksums(checksums_beside(path), [path.name])
    return path


def load_packed(path: str | Path) -> tuple[dict[str, Quantized], dict[str, torch.Tensor]]:
    """({layer name: Quantized}, {parameter name: fp16 tensor}) from a save_packed file, after
    checking its sha256 and that each layer's tensors have the shapes its layout gives."""
    path = Path(path)
    # before anything is read: a flipped bit would change codes and scales silently
    verify_checksums(checksums_beside(path), f"packed model {path}", REMEDY, [path.name])
    with safe_open(str(path), framework="pt") as file:
        layouts = json.loads((file.metadata() or {}).get("quantized_layers", "null"))
        if layouts is None:
            raise ValueError(f"{path} was not written by save_packed: it has no quantized layers")
        tensors = {key: file.get_tensor(key) for key in file.keys()}
    for name, tensor in tensors.items():  # a NaN scale or float parameter: refused, by name
        require_finite(tensor, f"tensor {name} of packed model {path}")
    layers = {}
    for name, layout in layouts.items():
        problem = layout_problem(name, layout, tensors)
        if problem:
            raise DamagedFile(f"packed model {path}", path.name, problem, REMEDY)
        bits, symmetric, columns = layout["bits"], layout["symmetric"], layout["in_features"]
        low, _ = code_range(bits, symmetric)
        codes = unpack_codes(tensors.pop(f"{name}.qweight"), bits, columns).to(torch.int16) + low
        scales = tensors.pop(f"{name}.scales").float()
        zeros = (unpack_codes(tensors.pop(f"{name}.qzeros"), bits, scales.shape[1]).float()
                 if not symmetric else torch.zeros_like(scales))
        dtype = torch.int8 if symmetric else torch.uint8
        layers[name] = Quantized(codes.to(dtype), scales, zeros, bits, symmetric,
                                 layout["group_size"])
    return layers, tensors


def layout_problem(name: str, layout: dict, tensors: dict[str, torch.Tensor]) -> str | None:
    """What is wrong with one layer of a packed file (its bits, its tensors' shapes), or None."""
    bits, group_size, columns = layout["bits"], layout["group_size"], layout["in_features"]
    if bits not in PACKABLE_BITS or group_size <= 0 or columns % group_size:
        return f"records {bits}-bit codes in groups of {group_size} of {columns} columns for {name}"
    kinds = ("qweight", "scales") if layout["symmetric"] else ("qweight", "scales", "qzeros")
    missing = [kind for kind in kinds if f"{name}.{kind}" not in tensors]
    if missing:
        return f"has no {name}.{missing[0]}"
    rows, groups = tensors[f"{name}.qweight"].shape[0], columns // group_size
    scale_rows = (rows, 1)  # a per-tensor grid has one row of scales
    expected = {"qweight": [(rows, -(-columns * bits // 8))],
                "scales": [(r, groups) for r in scale_rows],
                "qzeros": [(r, -(-groups * bits // 8)) for r in scale_rows]}
    for kind in kinds:
        found, shapes = tuple(tensors[f"{name}.{kind}"].shape), expected[kind]
        if found not in shapes:
            return (f"holds {name}.{kind} of shape {found}, where {bits}-bit codes of {columns} "
                    f"columns in groups of {group_size} need {' or '.join(map(str, shapes))}")
    return None
