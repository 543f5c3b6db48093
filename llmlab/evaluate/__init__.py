"""Evaluating model variants: perplexity, bits per byte (beside gzip and xz) and next-token
accuracy on fixed held-out windows, paired perplexity ratios with their noise, generation samples
side by side, completions by decoding strategy, BLEU and chrF through sacrebleu (and both written
out, checked against it, with CodeXGLUE's smoothed BLEU-4), bootstrap confidence intervals and
paired significance tests, multiple choice scored by log-likelihood, comparison tables (one for
pruned variants, one for quantized ones with bits per weight and the size each would ship), and
post-training quantization against quantization-aware training by perplexity."""

from llmlab.evaluate.bits_per_byte import (
    bits_per_byte,
    compressor_bits_per_byte,
    predicted_bytes,
    token_byte_lengths,
)
from llmlab.evaluate.bootstrap import (
    Interval,
    PairedComparison,
    bootstrap_interval,
    paired_bootstrap,
)
from llmlab.evaluate.compare import (
    VariantRow,
    check_plain,
    compare_variants,
    comparison_table,
    latency_seconds,
    size_on_disk,
)
from llmlab.evaluate.decoding import STRATEGIES, complete
from llmlab.evaluate.multiple_choice import (
    ChoiceResult,
    Question,
    continuation_logprob,
    multiple_choice,
    wilson_interval,
)
from llmlab.evaluate.next_token import TokenScores, next_token_accuracy, perplexity, score_tokens
from llmlab.evaluate.ngram_bleu import BleuCounts, corpus_bleu, sentence_counts, smoothed_bleu4
from llmlab.evaluate.ngram_chrf import corpus_chrf
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
    "BleuCounts", "ChoiceResult", "Interval", "PairedComparison", "PairedRatio", "QuantRow",
    "Question", "STRATEGIES", "TextScore", "TokenScores", "Variant", "VariantRow",
    "bits_per_byte", "bleu", "bootstrap_interval", "check_plain", "chrf", "compare_variants",
    "comparison_table", "complete", "compressor_bits_per_byte", "continuation_logprob",
    "corpus_bleu", "corpus_chrf", "fake_quant_variant", "float_variant", "generate_samples",
    "held_out_windows", "latency_seconds", "multiple_choice", "next_token_accuracy",
    "paired_bootstrap", "paired_perplexity_ratio", "perplexity", "predicted_bytes",
    "ptq_against_qat", "qat_variants", "quant_rows", "quant_table", "samples_table",
    "score_tokens", "sentence_counts", "size_on_disk", "smoothed_bleu4", "token_byte_lengths",
    "torch_save_bytes", "wilson_interval",
]  # fmt: skip
