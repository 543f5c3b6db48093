"""Evaluating model variants: perplexity and next-token accuracy on fixed held-out windows,
generation samples side by side, BLEU and chrF through sacrebleu, a comparison table, and
post-training quantization against quantization-aware training by perplexity."""

from llmlab.evaluate.compare import (
    VariantRow,
    check_plain,
    compare_variants,
    comparison_table,
    latency_seconds,
    size_on_disk,
)
from llmlab.evaluate.next_token import TokenScores, next_token_accuracy, perplexity, score_tokens
from llmlab.evaluate.qat import ptq_against_qat
from llmlab.evaluate.samples import generate_samples, samples_table
from llmlab.evaluate.translation import TextScore, bleu, chrf
from llmlab.evaluate.windows import held_out_windows

__all__ = [
    "TextScore", "TokenScores", "VariantRow", "bleu", "check_plain", "chrf", "compare_variants",
    "comparison_table", "generate_samples", "held_out_windows", "latency_seconds",
    "next_token_accuracy", "perplexity", "ptq_against_qat", "samples_table", "score_tokens",
    "size_on_disk",
]  # fmt: skip
