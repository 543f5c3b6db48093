"""BLEU and chrF through sacrebleu: the standard tokenisation and smoothing, so scores compare
with published ones (a hand-written BLEU rarely matches anyone else's)."""

from collections.abc import Sequence
from dataclasses import dataclass

import sacrebleu


@dataclass(frozen=True)
class TextScore:
    name: str  # "BLEU" or "chrF"
    score: float  # 0-100
    signature: str  # sacrebleu's record of the settings, to print beside the score


def references_per_hypothesis(
    hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]
) -> list[list[str]]:
    """One list of references per hypothesis (a single string becomes a list of one), checked:
    as many as the hypotheses, and the same number (>= 1) for each."""
    if isinstance(hypotheses, str):
        raise TypeError("hypotheses must be a list of strings, not one string")
    if len(references) != len(hypotheses):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: give one reference "
            "(a string) or one list of references per hypothesis"
        )
    per_hypothesis = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
    counts = {len(refs) for refs in per_hypothesis}
    if len(counts) != 1 or 0 in counts:
        raise ValueError(
            f"every hypothesis needs the same number (>= 1) of references, got {sorted(counts)}"
        )
    return per_hypothesis


def _reference_streams(
    hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]
) -> list[list[str]]:
    """sacrebleu wants one list per reference *set* (stream), each as long as the hypotheses;
    people hold references per hypothesis. Accept that, and transpose it here."""
    per_hypothesis = references_per_hypothesis(hypotheses, references)
    return [list(stream) for stream in zip(*per_hypothesis, strict=True)]


def _corpus_score(name: str, metric, hypotheses, references) -> TextScore:
    result = metric.corpus_score(list(hypotheses), _reference_streams(hypotheses, references))
    return TextScore(name, result.score, str(metric.get_signature()))


def bleu(
    hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]
) -> TextScore:
    """Corpus BLEU (not a mean of sentence BLEUs): n-gram counts summed over all sentences."""
    return _corpus_score("BLEU", sacrebleu.metrics.BLEU(), hypotheses, references)


def chrf(
    hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]
) -> TextScore:
    """Corpus chrF: character n-gram F-score, kinder than BLEU to morphology and short texts."""
    return _corpus_score("chrF", sacrebleu.metrics.CHRF(), hypotheses, references)
