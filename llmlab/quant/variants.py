"""One table for quantized variants of a model: perplexity, bits per weight (scales and zero
points counted), the size of the files each would ship, and CPU latency.

A row comes from (name, model, bits per weight, size in bytes): every library counts its bits and
writes its files its own way, so the caller measures those two with the helpers below (or the
library's) and `quant_rows` measures the rest the same way for all.
"""

import io
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from llmlab.evaluate.model_variants import eval_latency_seconds, size_on_disk, timed_batch
from llmlab.evaluate.next_token import score_tokens
from llmlab.models import block_matrices
from llmlab.quant.model import ModelQuantization
from llmlab.quant.pack import save_packed
from llmlab.tables import markdown_table
from llmlab.units import GB


class Variant(NamedTuple):
    """A model to put in the table, with what its format costs."""

    name: str
    model: nn.Module
    bits_per_weight: float  # of the block matrices, scales and zero points counted
    size_bytes: int  # of the files it would ship


@dataclass(frozen=True)
class QuantRow:
    variant: str
    perplexity: float
    bits_per_weight: float
    size_mb: float
    latency_ms: float  # median CPU forward pass over one batch of the windows


def float_variant(name: str, model: nn.Module) -> Variant:
    """A float model (fp32, bf16): its block matrices' own width, its save_pretrained files."""
    first = next(iter(block_matrices(model).values()))  # the blocks' first Linear / Conv1D
    return Variant(name, model, torch.finfo(first.weight.dtype).bits, size_on_disk(model))


def fake_quant_variant(name: str, model: nn.Module, report: ModelQuantization) -> Variant:
    """A model quantized in place by llmlab.quant.quantize_model: the bits its report counts, and
    the size of the packed file it would ship (codes 2 per byte at 4 bits, fp16 scales)."""
    with tempfile.TemporaryDirectory() as folder:
        size = save_packed(model, report, Path(folder) / "model.safetensors").stat().st_size
    return Variant(name, model, report.layer_bits_per_weight, size)


def torch_save_bytes(model: nn.Module) -> int:
    """Bytes of torch.save(model.state_dict()): how torchao's quantized models are saved (their
    weights are tensor subclasses, which safetensors does not hold)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes


def quant_rows(
    variants: Iterable[Variant | tuple],
    windows: Sequence[torch.Tensor],
    *,
    batch_size: int = 8,
    repeats: int = 5,
) -> list[QuantRow]:
    """Measure every variant on the same held-out windows: perplexity over all of them, latency
    on their first full batch. A variant is a Variant or a plain (name, model, bits, bytes)."""
    variants = [Variant(*variant) for variant in variants]
    if not variants or not windows:
        raise ValueError("need at least one variant and one held-out window to compare")
    timed = timed_batch(windows, batch_size)
    rows = []
    for name, model, bits, size_bytes in variants:
        rows.append(QuantRow(
            variant=name,
            perplexity=score_tokens(model, windows, batch_size).perplexity,
            bits_per_weight=float(bits),
            size_mb=size_bytes / (GB / 1000),  # MB: 10^6 bytes, as GB is 10^9
            latency_ms=eval_latency_seconds(model, timed, repeats) * 1000,
        ))
    return rows


def quant_table(rows: Sequence[QuantRow]) -> str:
    """The rows as Markdown, numbers rounded for reading."""
    formats = {"perplexity": "{:.2f}", "bits_per_weight": "{:.3f}", "size_mb": "{:.2f}",
               "latency_ms": "{:.2f}"}
    return markdown_table([
        {key: formats.get(key, "{}").format(value) for key, value in asdict(row).items()}
        for row in rows
    ])
