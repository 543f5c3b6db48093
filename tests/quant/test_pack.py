"""Packed codes and the shipped file of a fake-quantized model: two 4-bit codes per byte (a hand
example), packing round-trips at 2, 4 and 8 bits with padding, the file holds what the model
computes with and weighs what ModelQuantization counts, and bad input is refused: a damaged file
(its checksum), an edited bit width (the tensors' shapes), a file of another kind."""

import json
import math

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from llmlab.files import checksums_beside, write_checksums
from llmlab.models import ModelShape, build_model
from llmlab.quant import code_range, quantize, quantize_model
from llmlab.quant.model import matrix
from llmlab.quant.pack import load_packed, pack_codes, save_packed, unpack_codes

SHAPE = ModelShape("gpt2", 2, 64, 4, 512, 32)


def test_two_4_bit_codes_share_a_byte():
    packed = pack_codes(torch.tensor([[1, 2, 15, 0, 7]]), 4)
    assert packed.tolist() == [[0x21, 0x0F, 0x07]]  # first code in the low half; last padded
    assert unpack_codes(packed, 4, 5).tolist() == [[1, 2, 15, 0, 7]]


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_packing_round_trips(bits, symmetric):
    q = quantize(torch.randn(6, 30), bits, symmetric, "channel")  # 30: not a multiple of 4
    unsigned = q.codes.to(torch.int16) - code_range(bits, symmetric)[0]
    packed = pack_codes(unsigned, bits)
    assert packed.shape == (6, -(-30 * bits // 8))
    assert torch.equal(unpack_codes(packed, bits, 30), unsigned.to(torch.uint8))


def test_the_shipped_file_holds_the_model_and_weighs_what_is_counted(tmp_path):
    model = build_model(SHAPE).eval()
    report = quantize_model(model, "rtn", bits=4, group_size=32)
    path = save_packed(model, report, tmp_path / "model.safetensors")
    layers, rest = load_packed(path)
    assert layers.keys() == report.layers.keys()
    for name, q in layers.items():
        original = report.layers[name]
        assert torch.equal(q.codes, original.codes) and torch.equal(q.zeros, original.zeros)
        assert torch.equal(q.scales, original.scales.half().float())  # shipped in fp16
        module = model.get_submodule(name)
        torch.testing.assert_close(q.dequantize(), matrix(module), rtol=2e-3, atol=1e-5)
    assert set(rest) == {n for n, _ in model.named_parameters()} - {
        f"{name}.weight" for name in layers}
    counted_bytes = (report.quantized_bits + report.float_bits) / 8
    # beyond the counted bits only safetensors' JSON header: about 100 bytes per tensor here
    assert 0 < path.stat().st_size - counted_bytes < 10_000  # measured: 5.0 KB for 40 tensors


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="3-bit codes do not fill whole bytes"):
        pack_codes(torch.zeros(2, 8), 3)
    with pytest.raises(ValueError, match="from 0 to 15"):
        pack_codes(torch.tensor([[16]]), 4)
    plain = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(2)}, plain)
    with pytest.raises(ValueError, match="plain.safetensors.sha256 is missing"):
        load_packed(plain)  # no checksum: never read
    write_checksums(checksums_beside(plain), [plain.name])
    with pytest.raises(ValueError, match="not written by save_packed"):
        load_packed(plain)


def packed_file(tmp_path):
    model = build_model(SHAPE).eval()
    return save_packed(model, quantize_model(model, "rtn", bits=4, group_size=32),
                       tmp_path / "model.safetensors")


def test_a_nan_in_a_float_parameter_is_refused_on_save_and_on_load(tmp_path):
    model = build_model(SHAPE).eval()
    report = quantize_model(model, "rtn", bits=4, group_size=32)
    with torch.no_grad():
        model.transformer.ln_f.weight[3] = math.nan  # not quantized: shipped as it is, in fp16
    path = tmp_path / "model.safetensors"
    with pytest.raises(ValueError, match=r"parameter transformer.ln_f.weight holds 1 NaN or inf "
                       r"value\(s\), the first at index \(3,\)"):
        save_packed(model, report, path)
    assert not path.exists()  # nothing written
    path = packed_file(tmp_path)  # a file from elsewhere, consistent with its checksum
    with safe_open(str(path), framework="pt") as file:
        metadata = file.metadata()
        tensors = {key: file.get_tensor(key) for key in file.keys()}
    tensors["transformer.h.0.ln_1.bias"][5] = math.nan
    save_file(tensors, path, metadata=metadata)
    write_checksums(checksums_beside(path), [path.name])
    with pytest.raises(ValueError, match=r"tensor transformer.h.0.ln_1.bias of packed model "
                       r".*model.safetensors holds 1 NaN or inf value\(s\)"):
        load_packed(path)


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "checksum lost"])
def test_a_damaged_packed_file_is_refused(tmp_path, damage):
    path = packed_file(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flipped byte":
        data[len(data) // 3] ^= 0x10  # inside the tensors: a code or a scale changes
        path.write_bytes(data)
    elif damage == "truncated":
        path.write_bytes(data[:-100])
    else:
        checksums_beside(path).unlink()
    problem = "sha256 is missing" if damage == "checksum lost" else "differs from the sha256"
    with pytest.raises(ValueError, match=f"packed model .* is damaged: model.safetensors.*{problem}"
                       ".*llmlab.quant.save_packed$"):
        load_packed(path)


@pytest.mark.parametrize("bits", [2, 8])
def test_an_edited_bit_width_is_refused_by_the_tensor_shapes(tmp_path, bits):
    """A consistent file (its checksum recorded again) whose layout says `bits` for 4-bit codes."""
    path = packed_file(tmp_path)
    with safe_open(str(path), framework="pt") as file:
        layouts = json.loads(file.metadata()["quantized_layers"])
        tensors = {key: file.get_tensor(key) for key in file.keys()}
    for layout in layouts.values():
        layout["bits"] = bits
    save_file(tensors, path, metadata={"quantized_layers": json.dumps(layouts)})
    write_checksums(checksums_beside(path), [path.name])
    need = rf"need \(192, {64 * bits // 8}\)"  # c_attn: 192 rows of 64 columns
    with pytest.raises(ValueError, match=rf"c_attn.qweight of shape \(192, 32\), where {bits}-bit "
                       f"codes of 64 columns in groups of 32 {need}"):
        load_packed(path)
