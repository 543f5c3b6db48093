"""BLEU and chrF match sacrebleu's published example; mismatched references are refused."""

import pytest

from llmlab.evaluate import (
    bleu,
    chrf,
)

# The example of sacrebleu's README: BLEU 48.53 and chrF 59.73 with two reference sets.
SYSTEM = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]


STREAMS = [["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
           ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."]]


def test_bleu_and_chrf_match_sacrebleus_published_example():
    per_hypothesis = [list(refs) for refs in zip(*STREAMS, strict=True)]
    assert bleu(SYSTEM, per_hypothesis).score == pytest.approx(48.53, abs=0.01)
    assert chrf(SYSTEM, per_hypothesis).score == pytest.approx(59.73, abs=0.01)
    assert "nrefs:2" in bleu(SYSTEM, per_hypothesis).signature
    assert bleu(["a b c d"], ["a b c d"]).score == pytest.approx(100)
    # References matched to the wrong hypotheses score lower: the pairing matters.
    shuffled = per_hypothesis[1:] + per_hypothesis[:1]
    assert bleu(SYSTEM, shuffled).score < 40


def test_translation_scores_refuse_mismatched_references():
    with pytest.raises(ValueError, match="3 hypotheses but 2 references"):
        bleu(SYSTEM, STREAMS)  # reference sets given where per-hypothesis lists were expected
    with pytest.raises(ValueError, match="same number"):
        chrf(SYSTEM[:2], [["a", "b"], ["c"]])
    with pytest.raises(TypeError):
        bleu("one string", ["one string"])
