"""chrF, written out: an F-score over character n-grams (Popović 2015), as sacrebleu computes it.

BLEU counts whole words, so "computes" against "compute" earns nothing; chrF compares character
n-grams (1 to 6 characters, spaces removed), so near misses earn part of the credit, and it
needs no tokenizer. For each order n it counts the hypothesis n-grams, the reference n-grams and
the matches (clipped, as in BLEU), summed over the corpus. Precision and recall are averaged
over the orders that occur in both, and combined into an F-score that weighs recall beta = 2
times as much as precision: leaving something out costs more than adding a little.
With several references, each sentence keeps the counts of the reference it scores best against.
"""

from collections import Counter
from collections.abc import Sequence

from llmlab.evaluate.translation import references_per_hypothesis

CHAR_ORDER, BETA = 6, 2  # sacrebleu's CHRF() defaults


def char_ngrams(text: str, n: int) -> Counter:
    """Character n-grams of the text with its whitespace removed."""
    text = "".join(text.split())
    return Counter(text[i : i + n] for i in range(len(text) - n + 1))


def chrf_counts(hypothesis: str, reference: str, order: int = CHAR_ORDER) -> list[int]:
    """[hypothesis n-grams, reference n-grams, matches] for n = 1..order, flattened."""
    counts = []
    for n in range(1, order + 1):
        guessed, wanted = char_ngrams(hypothesis, n), char_ngrams(reference, n)
        matches = sum(min(count, wanted[gram]) for gram, count in guessed.items())
        # As sacrebleu: an order the reference is too short for counts no hypothesis n-grams.
        counts += [sum(guessed.values()) if wanted else 0, sum(wanted.values()), matches]
    return counts


def chrf_from_counts(counts: Sequence[int], beta: float = BETA) -> float:
    """chrF (0-100) from summed counts: precision and recall averaged over the orders present."""
    precisions, recalls = [], []
    for guessed, wanted, matched in zip(counts[0::3], counts[1::3], counts[2::3], strict=True):
        if guessed > 0 and wanted > 0:
            precisions.append(matched / guessed)
            recalls.append(matched / wanted)
    if not precisions:
        return 0.0
    precision, recall = sum(precisions) / len(precisions), sum(recalls) / len(recalls)
    if precision + recall == 0:
        return 0.0
    return 100 * (1 + beta**2) * precision * recall / (beta**2 * precision + recall)


def corpus_chrf(
    hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]
) -> float:
    """Corpus chrF (0-100): counts summed over sentences, then one score."""
    total = [0] * (3 * CHAR_ORDER)
    for hypothesis, refs in zip(hypotheses, references_per_hypothesis(hypotheses, references),
                                strict=True):
        # max() keeps the first of equal scores, as sacrebleu's strict "better than" does.
        best = max((chrf_counts(hypothesis, ref) for ref in refs), key=chrf_from_counts)
        total = [a + b for a, b in zip(total, best, strict=True)]
    return chrf_from_counts(total)
