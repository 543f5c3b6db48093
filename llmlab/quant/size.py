"""Size accounting: what a quantized weight really costs, scales and zero points included."""

from llmlab.quant.formats import Quantized

SCALE_BITS = 16  # scales stored in fp16, as GPTQ checkpoints store them


def quantized_bits(q: Quantized, scale_bits: int = SCALE_BITS, zero_bits: int | None = None) -> int:
    """Total bits: the codes, a scale per group and, for asymmetric grids, a zero point per group
    (packed at the code width by default, as GPTQ checkpoints pack their qzeros)."""
    zero_bits = q.bits if zero_bits is None else zero_bits
    groups = q.scales.numel()
    zero_total = 0 if q.symmetric else groups * zero_bits
    return q.codes.numel() * q.bits + groups * scale_bits + zero_total


def bits_per_weight(
    q: Quantized, scale_bits: int = SCALE_BITS, zero_bits: int | None = None
) -> float:
    """Average bits per weight: int4 with group size 128, fp16 scales and 4-bit zeros costs
    4 + 16/128 + 4/128 = 4.156."""
    return quantized_bits(q, scale_bits, zero_bits) / q.codes.numel()
