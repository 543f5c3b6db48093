"""Heuristic quality filters of the kind web-scale pipelines run before training: each rule a test a
document fails or passes, with thresholds from the Gopher paper's rules (Rae et al., 2021) and two
of C4's. They were tuned on web pages, where they remove menus, spam, tables and machine output;
`rule_shares` shows what each removes from other kinds of text, code among them.

Words are whitespace-separated runs (as the rules were written); lines are split on "\\n".
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))


@dataclass(frozen=True)
class Rule:
    name: str
    fails: Callable[[str], bool]  # True: the rule removes the document


def mean_word_length(text: str) -> float:
    words = text.split()
    return sum(map(len, words)) / len(words) if words else 0.0


def symbols_per_word(text: str) -> float:
    """Hash signs and ellipses ("..." or "…") per word."""
    words = text.split()
    symbols = text.count("#") + text.count("...") + text.count("…")
    return symbols / len(words) if words else float("inf")


def alphabetic_word_share(text: str) -> float:
    """The share of words with at least one letter."""
    words = text.split()
    return sum(any(map(str.isalpha, w)) for w in words) / len(words) if words else 0.0


def stop_words_in(text: str) -> int:
    """How many of the 8 stop words occur (lowercased, as whole words)."""
    return len(STOP_WORDS & set(text.lower().split()))


def repeated_line_share(text: str) -> float:
    """The share of non-empty lines that repeat an earlier line of the document."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    return (len(lines) - len(set(lines))) / len(lines) if lines else 0.0


WORD_COUNT = Rule("fewer than 50 or more than 100,000 words",
                  lambda t: not 50 <= len(t.split()) <= 100_000)
MEAN_WORD_LENGTH = Rule("mean word length outside 3 to 10",
                        lambda t: not 3 <= mean_word_length(t) <= 10)
SYMBOLS = Rule("more than 0.1 '#' or '...' per word", lambda t: symbols_per_word(t) > 0.1)
ALPHABETIC = Rule("under 80% of words with a letter", lambda t: alphabetic_word_share(t) < 0.8)
STOP_WORD_COUNT = Rule("fewer than 2 of the 8 stop words", lambda t: stop_words_in(t) < 2)
REPEATED_LINES = Rule("over 30% of lines repeated", lambda t: repeated_line_share(t) > 0.3)
GOPHER_RULES = (WORD_COUNT, MEAN_WORD_LENGTH, SYMBOLS, ALPHABETIC, STOP_WORD_COUNT, REPEATED_LINES)

C4_RULES = (
    Rule("a curly brace (C4's rule against code)", lambda t: "{" in t),
    Rule("'lorem ipsum' (C4's placeholder rule)", lambda t: "lorem ipsum" in t.lower()),
)


# The sets a dataset's cleaning can name (CleaningConfig.quality_rules).
RULE_SETS = {"gopher": GOPHER_RULES, "c4": C4_RULES, "gopher+c4": GOPHER_RULES + C4_RULES}


def passes(text: str, rules: Sequence[Rule]) -> bool:
    return not any(rule.fails(text) for rule in rules)


def rule_shares(groups: Mapping[str, Sequence[str]],
                rules: Sequence[Rule]) -> dict[str, dict[str, float]]:
    """For each rule, the share of each group's documents it removes (alone), and for "all rules"
    the share that fails at least one: {rule name: {group: share}}."""
    shares = {rule.name: {group: sum(map(rule.fails, texts)) / len(texts)
                          for group, texts in groups.items()} for rule in rules}
    shares["all rules"] = {group: sum(not passes(t, rules) for t in texts) / len(texts)
                           for group, texts in groups.items()}
    return shares
