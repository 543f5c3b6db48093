"""The quality rules measure what their names say, on hand-made texts at and around their
thresholds, and the report gives each rule's share per group and the share failing any rule.
Mistakes caught: a threshold on the wrong side, ellipses or hashes not counted, a repeated line
counted once too often, a stop word matched inside another word, an empty text dividing by 0."""

import base64
import random

import pytest

from llmlab.data.quality import (
    C4_RULES,
    GOPHER_RULES,
    alphabetic_word_share,
    mean_word_length,
    passes,
    repeated_line_share,
    rule_shares,
    stop_words_in,
    symbols_per_word,
)

PROSE = ("The model reads the text that we give to it, and it learns with each step of the "
         "training run. ") * 4  # 80 words, plain English


def test_the_measures_on_hand_made_texts():
    assert mean_word_length("ab abcd") == 3.0
    assert symbols_per_word("# one two three ... four") == 2 / 6  # the ellipsis is a word too
    assert symbols_per_word("wait… what") == 0.5
    assert alphabetic_word_share("a 12 b3 -- c") == 3 / 5
    assert stop_words_in("The theory of thebes, and THE end") == 3  # the, of, and; not "theory"
    assert repeated_line_share("a\nb\na\n\na\nc") == 2 / 5  # blank lines do not count
    for empty in ("", "   \n"):
        assert mean_word_length(empty) == 0.0 and repeated_line_share(empty) == 0.0


def test_plain_prose_passes_every_rule_and_each_rule_catches_its_case():
    assert passes(PROSE, GOPHER_RULES + C4_RULES)
    failing = {
        "fewer than 50 or more than 100,000 words": "The end of the text.",
        "mean word length outside 3 to 10": PROSE.replace("training", "x" * 400),
        "more than 0.1 '#' or '...' per word": PROSE + " #" * 10,
        "under 80% of words with a letter": PROSE + " 1 2 3 4 5 6 7 8 9 10" * 3,
        "fewer than 2 of the 8 stop words": " ".join(["model"] * 60),
        "over 30% of lines repeated": "\n".join([PROSE] * 3 + ["other"] * 4),
        "a curly brace (C4's rule against code)": PROSE + " {",
        "'lorem ipsum' (C4's placeholder rule)": PROSE + " Lorem Ipsum",
    }
    for rule in GOPHER_RULES + C4_RULES:
        assert rule.fails(failing[rule.name]), rule.name
        assert not rule.fails(PROSE), rule.name


def test_the_report_gives_each_rules_share_and_the_share_failing_any():
    rng = random.Random(0)
    blobs = [base64.encodebytes(rng.randbytes(3000)).decode() for _ in range(4)]
    shares = rule_shares({"prose": [PROSE, PROSE + " {"], "blobs": blobs}, GOPHER_RULES)
    assert shares["mean word length outside 3 to 10"] == {"prose": 0.0, "blobs": 1.0}
    assert shares["all rules"] == {"prose": 0.0, "blobs": 1.0}
    assert rule_shares({"prose": [PROSE, PROSE + " {"]}, C4_RULES)["all rules"] == {"prose": 0.5}


@pytest.mark.parametrize("text", ["", "#"])
def test_texts_without_words_fail_the_word_rules(text):
    assert not passes(text, GOPHER_RULES)
