"""Evaluating model variants: perplexity, bits per byte (beside gzip and xz) and next-token
accuracy on fixed held-out windows, generation samples side by side, BLEU and chrF through
sacrebleu, comparison tables (one for pruned variants, one for quantized ones with bits per
weight and the size each would ship), and post-training quantization against
quantization-aware training by perplexity."""

from llmlab.evaluate.bits_per_byte import (
    bits_per_byte,
    compressor_bits_per_byte,
    predicted_bytes,
    token_byte_lengths,
)
from llmlab.evaluate.compare import (
    VariantRow,
    check_plain,
    compare_variants,
    comparison_table,
    latency_seconds,
    size_on_disk,
)
from llmlab.evaluate.next_token import TokenScores, next_token_accuracy, perplexity, score_tokens
from llmlab.evaluate.paired import PairedRatio, paired_perplexity_ratio
from llmlab.evaluate.qat import ptq_against_qat, qat_variants
from llmlab.evaluate.quantized import (
    QuantRow,
    Variant,
    fake_quant_variant,
    float_variant,
    quant_rows,
    quant_table,
    torch_save_bytes,
)
from llmlab.evaluate.samples import generate_samples, samples_table
from llmlab.evaluate.translation import TextScore, bleu, chrf
from llmlab.evaluate.windows import held_out_windows

__all__ = [
    "PairedRatio", "QuantRow", "TextScore", "TokenScores", "Variant", "VariantRow",
    "bits_per_byte", "bleu", "check_plain", "chrf", "compare_variants", "comparison_table",
    "compressor_bits_per_byte", "fake_quant_variant", "float_variant", "generate_samples",
    "held_out_windows", "latency_seconds", "next_token_accuracy", "paired_perplexity_ratio",
    "perplexity", "predicted_bytes", "ptq_against_qat", "qat_variants", "quant_rows",
    "quant_table", "samples_table", "score_tokens", "size_on_disk", "token_byte_lengths",
    "torch_save_bytes",
]  # fmt: skip
