"""chrF written out equals sacrebleu's CHRF() on random corpora and edge cases; the plausible
mistakes (spaces kept in the n-grams, beta = 1, no clipping, a mean of sentence scores) do not."""

import random

import pytest
import sacrebleu

from llmlab.evaluate import ngram_chrf
from llmlab.evaluate.ngram_chrf import chrf_counts, corpus_chrf

WORDS = "the cat cats sat sits on a mat mats , . running runs".split()
EDGE_CASES = {
    "empty hypothesis": (["", "the cat"], [["the cat sat"], ["the cat"]]),
    "short reference": (["the cat sat"], [["a"]]),
    "no match": (["xyz"], [["the cat"]]),
    "near miss": (["the cats sits"], [["the cat sat"]]),
    "two references": (["the cat sat"], [["a cat sits", "the cats sat"]]),
    "repeated": (["aaaa aaaa"], [["aa"]]),
}


def sacre(hypotheses, references, **options):
    streams = [list(s) for s in zip(*references, strict=True)]
    return sacrebleu.metrics.CHRF(**options).corpus_score(hypotheses, streams).score


def random_corpus(rng, references):
    def sentence():
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 8)))

    hypotheses = [sentence() for _ in range(5)]
    return hypotheses, [[sentence() for _ in range(references)] for _ in hypotheses]


def test_matches_sacrebleu_on_random_corpora():
    rng = random.Random(0)
    for trial in range(60):
        hypotheses, references = random_corpus(rng, 1 + trial % 3)
        expected = sacre(hypotheses, references)
        assert corpus_chrf(hypotheses, references) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("case", EDGE_CASES)
def test_matches_sacrebleu_on_edge_cases(case):
    hypotheses, references = EDGE_CASES[case]
    assert corpus_chrf(hypotheses, references) == pytest.approx(sacre(hypotheses, references))


def test_a_near_miss_earns_chrf_but_not_bleu():
    hypotheses, references = EDGE_CASES["near miss"]
    assert corpus_chrf(hypotheses, references) > 30
    assert sacrebleu.corpus_bleu(hypotheses, [["the cat sat"]]).score < 20


def with_spaces(hypothesis, reference, order=6):
    counts = []
    for n in range(1, order + 1):
        grams = [[text[i : i + n] for i in range(len(text) - n + 1)]
                 for text in (hypothesis, reference)]
        guessed, wanted = map(ngram_chrf.Counter, grams)
        matched = sum(min(c, wanted[g]) for g, c in guessed.items())
        counts += [sum(guessed.values()) if wanted else 0, sum(wanted.values()), matched]
    return counts


def unclipped(hypothesis, reference, order=6):
    counts = chrf_counts(hypothesis, reference, order)
    for n in range(order):  # matches counted as often as the hypothesis has them
        guessed = ngram_chrf.char_ngrams(hypothesis, n + 1)
        wanted = ngram_chrf.char_ngrams(reference, n + 1)
        counts[3 * n + 2] = sum(c for g, c in guessed.items() if g in wanted)
    return counts


@pytest.mark.parametrize(
    "mistake, name, wrong",
    [("spaces kept", "chrf_counts", with_spaces),
     ("no clipping", "chrf_counts", unclipped),
     ("beta = 1", "BETA", 1)],
)
def test_each_mistake_disagrees_with_sacrebleu(monkeypatch, mistake, name, wrong):
    monkeypatch.setattr(ngram_chrf, name, wrong)
    if name == "BETA":  # the default argument was bound at definition: patch the function too
        original = ngram_chrf.chrf_from_counts
        monkeypatch.setattr(ngram_chrf, "chrf_from_counts", lambda c, beta=1: original(c, beta))
    cases = [EDGE_CASES[c] for c in ("near miss", "repeated", "two references")]
    assert any(corpus_chrf(h, r) != pytest.approx(sacre(h, r)) for h, r in cases), mistake


def test_a_mean_of_sentence_scores_is_not_corpus_chrf():
    hypotheses, references = random_corpus(random.Random(1), 1)
    mean = sum(corpus_chrf([h], [r]) for h, r in zip(hypotheses, references, strict=True)) / 5
    assert mean != pytest.approx(sacre(hypotheses, references))
