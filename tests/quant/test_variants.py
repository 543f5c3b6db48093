"""The quantization table on a tiny GPT-2: every row is measured the same way, a row is added
from a plain (name, model, bits, bytes), float rows read their dtype, the fake-quant row's size
is the packed file's (about a quarter of fp16 for the blocks), torchao's its torch.save bytes."""

import pytest
import torch

from llmlab.evaluate import held_out_windows, score_tokens, size_on_disk
from llmlab.models import ModelShape, build_model
from llmlab.quant import quantize_model
from llmlab.quant.torchao_int8 import int8_model
from llmlab.quant.variants import (
    QuantRow,
    Variant,
    fake_quant_variant,
    float_variant,
    quant_rows,
    quant_table,
    torch_save_bytes,
)

SHAPE = ModelShape("gpt2", 2, 64, 4, 512, 64)


def windows():
    stream = torch.randint(0, 512, (4 * 32 + 1,), generator=torch.Generator().manual_seed(0))
    return held_out_windows(stream, 32)


def test_float_variants_read_their_dtype_and_files():
    model = build_model(SHAPE)
    fp32 = float_variant("fp32", model)
    bf16 = float_variant("bf16", build_model(SHAPE, dtype=torch.bfloat16))
    assert (fp32.bits_per_weight, bf16.bits_per_weight) == (32, 16)
    assert fp32.size_bytes == size_on_disk(model)
    assert bf16.size_bytes == pytest.approx(fp32.size_bytes / 2, rel=0.01)


def test_the_fake_quant_row_ships_packed_codes():
    model = build_model(SHAPE)
    blocks = sum(p.numel() for n, p in model.named_parameters() if ".h." in n and "weight" in n
                 and p.dim() == 2)
    fp16_bytes = float_variant("fp32", model).size_bytes / 2
    report = quantize_model(model, "rtn", bits=4, group_size=32)
    variant = fake_quant_variant("RTN-4", model, report)
    assert variant.bits_per_weight == report.layer_bits_per_weight
    # the blocks' matrices shrink from 16 to about 4.6 bits, the rest stays fp16
    saved = fp16_bytes - variant.size_bytes
    expected = blocks * (16 - report.layer_bits_per_weight) / 8
    assert saved == pytest.approx(expected, abs=8_000)  # headers differ: 3.7 KB measured


def test_rows_measure_every_variant_the_same_way():
    model = build_model(SHAPE).eval()
    int8 = int8_model(model)
    variants = [float_variant("fp32", model), ("int8", int8, 8.5, torch_save_bytes(int8))]
    rows = quant_rows(variants, windows(), repeats=1)
    assert [row.variant for row in rows] == ["fp32", "int8"]
    assert rows[0].perplexity == pytest.approx(score_tokens(model, windows()).perplexity)
    assert rows[1].bits_per_weight == 8.5
    assert rows[1].size_mb == pytest.approx(torch_save_bytes(int8) / 1e6)
    assert rows[1].size_mb < 0.8 * rows[0].size_mb  # int8 blocks, float embeddings
    assert all(row.latency_ms > 0 for row in rows)
    assert rows[1].perplexity != rows[0].perplexity  # int8 changes the logits a little
    header = quant_table(rows).splitlines()[0]
    assert header == "variant | perplexity | bits_per_weight | size_mb | latency_ms"


def test_a_model_keeps_its_training_mode():
    model = build_model(SHAPE)  # training mode, as build_model returns it
    quant_rows([Variant("fp32", model, 32, 1)], windows(), repeats=1)
    assert model.training


def test_nothing_to_compare_is_refused():
    with pytest.raises(ValueError, match="at least one variant"):
        quant_rows([], windows())
    assert isinstance(QuantRow("x", 1.0, 4.0, 1.0, 1.0).bits_per_weight, float)
