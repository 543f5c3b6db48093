"""BLEU, written out: the reference a learner's BLEU is checked against (sacrebleu checks it).

(Named ngram_bleu: `llmlab.evaluate.bleu` is the sacrebleu wrapper of translation.py.)

Corpus BLEU (Papineni et al. 2002) in four steps:
1. For each sentence and each n = 1..4, count the hypothesis n-grams (`totals`) and how many of
   them the reference also has, each n-gram counted at most as often as the reference has it
   (`matches`, "clipped": "the the the" earns one "the" against "the cat").
2. Sum the counts over the whole corpus (a corpus score is not a mean of sentence scores).
3. Take the geometric mean of the four precisions matches / totals.
4. Multiply by the brevity penalty exp(1 - r / c) when the hypotheses (c tokens) are shorter than
   the references (r tokens; with several references per sentence, the closest length), since
   precision alone rewards saying little.

One n-gram order with no match makes the geometric mean 0; smoothing decides what to do instead.
The methods are sacrebleu's (after Chen & Cherry 2014), with its defaults:
- "none": the score is 0.
- "floor": a precision with no match becomes `smooth_value` (0.1) / totals.
- "add-k": add `smooth_value` (1) to matches and totals of every order n > 1.
- "exp" (sacrebleu's default, after NIST's mteval): the k-th order with no match gets
  1 / (2^k totals).
Tokenization is sacrebleu's "13a" (punctuation split from words): the tokenizer is not the
lesson, but it changes the score, so it is an argument.

Code summarization papers (CodeXGLUE's code-to-text) report another BLEU, `smoothed_bleu4`: a
BLEU per sentence with add-one smoothing for n > 1 (Lin & Och 2004) and a brevity penalty with +1
on both lengths, averaged over sentences, on lowercased words and punctuation marks (`_` is one:
`__init__` is five tokens). It is not
sacrebleu's number: the two differ by points on the same outputs, so say which one a table holds.
"""

import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from llmlab.evaluate.translation import references_per_hypothesis

MAX_ORDER = 4
SMOOTH_DEFAULTS = {"none": None, "floor": 0.1, "add-k": 1, "exp": None}  # sacrebleu's
_13A = Tokenizer13a()


def tokenize_13a(text: str) -> list[str]:
    """sacrebleu's default tokenization: punctuation split off, then split on whitespace."""
    return _13A(text.rstrip()).split()


@dataclass(frozen=True)
class BleuCounts:
    """What BLEU needs from a sentence or a corpus; counts of two sentences add up."""

    hypothesis_length: int
    reference_length: int
    matches: tuple[int, ...]  # clipped matching n-grams, n = 1..MAX_ORDER
    totals: tuple[int, ...]  # hypothesis n-grams, n = 1..MAX_ORDER

    def __add__(self, other: "BleuCounts") -> "BleuCounts":
        return BleuCounts(
            self.hypothesis_length + other.hypothesis_length,
            self.reference_length + other.reference_length,
            tuple(a + b for a, b in zip(self.matches, other.matches, strict=True)),
            tuple(a + b for a, b in zip(self.totals, other.totals, strict=True)),
        )


def ngram_counts(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def sentence_counts(
    hypothesis: Sequence[str], references: Sequence[Sequence[str]], max_order: int = MAX_ORDER
) -> BleuCounts:
    """Clipped matches and totals of one tokenized hypothesis against its tokenized references."""
    lengths = [len(reference) for reference in references]
    # The closest reference length; on a tie, the shorter one (as sacrebleu and mteval).
    closest = min(lengths, key=lambda length: (abs(length - len(hypothesis)), length))
    matches, totals = [], []
    for n in range(1, max_order + 1):
        guessed = ngram_counts(hypothesis, n)
        allowed = Counter()  # the most times any one reference has each n-gram
        for reference in references:
            allowed |= ngram_counts(reference, n)
        matches.append(sum(min(count, allowed[gram]) for gram, count in guessed.items()))
        totals.append(sum(guessed.values()))
    return BleuCounts(len(hypothesis), closest, tuple(matches), tuple(totals))


def bleu_from_counts(
    counts: BleuCounts, smooth: str = "exp", smooth_value: float | None = None
) -> float:
    """BLEU (0-100) from summed counts, with sacrebleu's smoothing methods (module docstring)."""
    if smooth not in SMOOTH_DEFAULTS:
        raise ValueError(f"unknown smoothing {smooth!r}: use one of {sorted(SMOOTH_DEFAULTS)}")
    value = SMOOTH_DEFAULTS[smooth] if smooth_value is None else smooth_value
    c, r = counts.hypothesis_length, counts.reference_length
    brevity = 1.0 if c >= r else (math.exp(1 - r / c) if c > 0 else 0.0)
    if not any(counts.matches):  # nothing matches at all: no smoothing rescues it
        return 0.0
    log_sum, halvings = 0.0, 0
    for n, (matched, total) in enumerate(zip(counts.matches, counts.totals, strict=True), 1):
        if smooth == "add-k" and n > 1:
            matched, total = matched + value, total + value
        if total == 0:  # hypotheses too short to hold an n-gram of this order
            return 0.0
        if matched > 0:
            precision = matched / total
        elif smooth == "exp":
            halvings += 1
            precision = 1 / (2**halvings * total)
        elif smooth == "floor":
            precision = value / total
        else:
            return 0.0
        log_sum += math.log(precision)
    return 100 * brevity * math.exp(log_sum / len(counts.matches))


def corpus_bleu(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    smooth: str = "exp",
    smooth_value: float | None = None,
    tokenize: Callable[[str], list[str]] = tokenize_13a,
    max_order: int = MAX_ORDER,
) -> float:
    """Corpus BLEU (0-100): counts summed over all sentences, then one score. `references`: one
    string or one list of strings per hypothesis."""
    per_hypothesis = references_per_hypothesis(hypotheses, references)
    total = BleuCounts(0, 0, (0,) * max_order, (0,) * max_order)
    for hypothesis, refs in zip(hypotheses, per_hypothesis, strict=True):
        total += sentence_counts(tokenize(hypothesis), [tokenize(r) for r in refs], max_order)
    return bleu_from_counts(total, smooth, smooth_value)


def split_punctuation(text: str) -> list[str]:
    """CodeXGLUE's tokens: lowercased runs of letters and digits, and each punctuation mark,
    the underscore included ("self_obj" is three tokens). Their script splits words from
    punctuation, then its NIST normalisation splits off `_` too (a regex word keeps it)."""
    return re.findall(r"[^\W_]+|[^\w\s]|_", text.strip().lower())


def smoothed_bleu4(
    hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]
) -> float:
    """CodeXGLUE code-to-text's smoothed BLEU-4 (0-100): the mean of sentence scores (module
    docstring); with several references, the shortest one's length counts (as theirs)."""
    scores = []
    per_hypothesis = references_per_hypothesis(hypotheses, references)
    for hypothesis, refs in zip(hypotheses, per_hypothesis, strict=True):
        tokenized = [split_punctuation(r) for r in refs]
        counts = sentence_counts(split_punctuation(hypothesis), tokenized)
        counts = replace(counts, reference_length=min(map(len, tokenized)))
        scores.append(_smoothed_sentence_bleu4(counts))
    return 100 * sum(scores) / len(scores)


def _smoothed_sentence_bleu4(counts: BleuCounts) -> float:
    # float_info.min keeps log(0) finite, as in CodeXGLUE's script: no unigram match gives about
    # 1e-77, not an error.
    tiny = sys.float_info.min
    log_sum = 0.0
    for n, (matched, total) in enumerate(zip(counts.matches, counts.totals, strict=True), 1):
        add = 1 if n > 1 else 0  # add-one smoothing for bigrams and longer only
        log_sum += math.log(matched + add + tiny) - math.log(total + add + tiny)
    c, r = counts.hypothesis_length, counts.reference_length
    log_brevity = min(0.0, 1 - (r + 1) / (c + 1))
    return math.exp(log_sum / len(counts.matches) + log_brevity)
