"""Evaluating model variants: perplexity, bits per byte (beside gzip and xz) and next-token
accuracy on fixed held-out windows, paired perplexity ratios with their noise, generation samples
side by side, completions by decoding strategy, BLEU and chrF through sacrebleu (and both written
out, checked against it, with CodeXGLUE's smoothed BLEU-4), bootstrap confidence intervals and
paired significance tests, a score's spread over training seeds, multiple choice scored by
log-likelihood, contamination (test examples found in the training data, verbatim or
reformatted, by MinHash), and the comparison table of model variants (the quantized variants'
table and PTQ against QAT, which build and train models, are llmlab.quant's)."""

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
    paired_percentile,
    percentile_test,
    resample_indices,
)
from llmlab.evaluate.contamination import (
    exact_copies,
    minhashes,
    near_duplicates,
)
from llmlab.evaluate.decoding import STRATEGIES, complete
from llmlab.evaluate.model_variants import (
    VariantRow,
    check_plain,
    compare_variants,
    comparison_table,
    latency_seconds,
    size_on_disk,
)
from llmlab.evaluate.multiple_choice import (
    ChoiceResult,
    Question,
    continuation_logprob,
    continuation_logprobs,
    multiple_choice,
    wilson_interval,
)
from llmlab.evaluate.next_token import (
    TokenScores,
    next_token_accuracy,
    perplexity,
    perplexity_of,
    score_tokens,
)
from llmlab.evaluate.ngram_bleu import BleuCounts, corpus_bleu, sentence_counts, smoothed_bleu4
from llmlab.evaluate.ngram_chrf import corpus_chrf
from llmlab.evaluate.paired import PairedRatio, paired_perplexity_ratio
from llmlab.evaluate.samples import generate_samples, samples_table
from llmlab.evaluate.seeds import SeedSpread, seed_spread
from llmlab.evaluate.translation import TextScore, bleu, chrf
from llmlab.evaluate.windows import held_out_windows

__all__ = [
    "BleuCounts", "ChoiceResult", "Interval", "PairedComparison", "PairedRatio", "Question",
    "STRATEGIES", "SeedSpread", "TextScore", "TokenScores", "VariantRow", "bits_per_byte", "bleu",
    "bootstrap_interval", "check_plain", "chrf", "compare_variants", "comparison_table", "complete",
    "compressor_bits_per_byte", "continuation_logprob", "continuation_logprobs", "corpus_bleu",
    "corpus_chrf",
    "exact_copies", "generate_samples", "held_out_windows", "latency_seconds",
    "minhashes", "multiple_choice", "near_duplicates", "next_token_accuracy",
    "paired_bootstrap", "paired_percentile", "paired_perplexity_ratio", "percentile_test",
    "perplexity", "perplexity_of", "predicted_bytes", "resample_indices", "samples_table",
    "score_tokens", "seed_spread", "sentence_counts", "size_on_disk", "smoothed_bleu4",
    "token_byte_lengths", "wilson_interval",
]
