"""Cleaning: normalize each text, then drop documents that are too short, too long, low quality or
exact duplicates, and on request those that fail a set of web-page quality rules (Gopher's, C4's:
llmlab.data.quality) or are near-copies of an earlier one (MinHash-LSH: llmlab.data.dedup). A
report says what each step removed (documents and characters). The two requested steps are off by
default: the quality rules were tuned on web pages and remove much of a corpus's code, and the
built-in corpus has no near-copies to find.

Deliberately missing, unlike many tutorials: removing punctuation and lowercasing by default.
A language model should see text as it will be asked to write it; punctuation is most of code's
syntax, and a model trained on lowercased text can never produce a capital letter.
"""

import hashlib
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from llmlab.data.dedup import drop_near_duplicates
from llmlab.data.documents import Document
from llmlab.data.quality import RULE_SETS, passes
from llmlab.tables import markdown_table

# C0 and C1 control characters (Unicode category Cc) except tab and newline.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
NEWLINES = re.compile(r"\r\n?")  # Windows (CRLF) and old Mac (CR) line ends
REPLACEMENT_CHARACTER = "\ufffd"  # what a lossy UTF-8 decode puts for each undecodable sequence


def normalize_text(text: str, form: str = "NFC") -> str:
    """One form for equal-looking text: Unicode `form`, "\\n" line ends, no control characters,
    no trailing whitespace on any line. Indentation (leading whitespace) is kept: in code it means
    something."""
    text = NEWLINES.sub("\n", text)
    text = CONTROL_CHARACTERS.sub("", text)
    # NFC composes "e" + U+0301 into "é"; NFKC also folds compatibility characters ("ﬁ" -> "fi").
    text = unicodedata.normalize(form, text)
    return "\n".join(line.rstrip() for line in text.split("\n"))


@dataclass(frozen=True)
class CleaningConfig:
    unicode_form: str = "NFC"
    lowercase: bool = False  # lossy: see the module's docstring
    min_chars: int = 64  # shorter texts (empty __init__.py files, stubs) teach nothing
    max_chars: int = 1_000_000  # longer ones are usually data dumps, not prose or code
    min_letter_fraction: float = 0.35  # below it: tables of numbers and escapes, not language
    max_line_chars: int = 1000  # longer lines: minified or generated data
    deduplicate: bool = True
    quality_rules: str = ""  # a name in llmlab.data.quality.RULE_SETS ("gopher", ...); "": none
    near_duplicates: float = 0.0  # > 0: drop near-copies of this Jaccard similarity; 0: off

    def __post_init__(self) -> None:
        if self.quality_rules and self.quality_rules not in RULE_SETS:
            raise ValueError(f"unknown quality rules {self.quality_rules!r}: use one of "
                             f"{tuple(RULE_SETS)}, or '' for none")
        if not (self.near_duplicates == 0 or 0 < self.near_duplicates < 1):
            raise ValueError("near_duplicates is a Jaccard similarity in (0, 1), or 0 for off; "
                             f"got {self.near_duplicates}")


@dataclass(frozen=True)
class StepReport:
    step: str
    documents_removed: int
    chars_removed: int


@dataclass
class CleaningReport:
    documents_in: int
    chars_in: int
    steps: list[StepReport] = field(default_factory=list)

    @property
    def documents_out(self) -> int:
        return self.documents_in - sum(s.documents_removed for s in self.steps)

    @property
    def chars_out(self) -> int:
        return self.chars_in - sum(s.chars_removed for s in self.steps)

    def table(self) -> str:
        rows = [{"step": s.step, "documents removed": f"{s.documents_removed:,}",
                 "characters removed": f"{s.chars_removed:,}"} for s in self.steps]
        rows.append({"step": "kept", "documents removed": f"{self.documents_out:,}",
                     "characters removed": f"{self.chars_out:,}"})
        return markdown_table(rows, aligned=True)


def letter_fraction(text: str) -> float:
    return sum(map(str.isalpha, text)) / max(len(text), 1)


def _quality_problem(text: str, config: CleaningConfig) -> bool:
    longest_line = max(len(line) for line in text.split("\n"))
    too_few_letters = letter_fraction(text) < config.min_letter_fraction
    return too_few_letters or longest_line > config.max_line_chars


def clean_documents(
    documents: Sequence[Document], config: CleaningConfig = CleaningConfig()
) -> tuple[list[Document], CleaningReport]:
    """Apply the text steps to every document, then the filters; report what each one removed."""
    docs = list(documents)
    report = CleaningReport(len(docs), sum(len(d.text) for d in docs))

    def edit(step: str, fn: Callable[[str], str]) -> None:
        nonlocal docs
        before = sum(len(d.text) for d in docs)
        docs = [replace(d, text=fn(d.text)) for d in docs]
        report.steps.append(StepReport(step, 0, before - sum(len(d.text) for d in docs)))

    def keep(step: str, predicate: Callable[[Document], bool]) -> None:
        nonlocal docs
        verdicts = [predicate(d) for d in docs]  # once each: the duplicate test remembers
        dropped = [d for d, ok in zip(docs, verdicts, strict=True) if not ok]
        docs = [d for d, ok in zip(docs, verdicts, strict=True) if ok]
        report.steps.append(StepReport(step, len(dropped), sum(len(d.text) for d in dropped)))

    edit("undecodable bytes (U+FFFD)", lambda t: t.replace(REPLACEMENT_CHARACTER, ""))
    edit(f"normalize ({config.unicode_form}, newlines, controls)",
         lambda t: normalize_text(t, config.unicode_form))
    if config.lowercase:
        edit("lowercase", str.lower)
    keep(f"too short (< {config.min_chars} chars)", lambda d: len(d.text) >= config.min_chars)
    keep(f"too long (> {config.max_chars:,} chars)", lambda d: len(d.text) <= config.max_chars)
    keep("low quality (letters, line length)", lambda d: not _quality_problem(d.text, config))
    if config.deduplicate:
        seen: set[bytes] = set()

        def first_copy(doc: Document) -> bool:
            digest = hashlib.sha256(doc.text.encode("utf-8")).digest()
            new = digest not in seen
            seen.add(digest)
            return new

        keep("exact duplicates (sha256)", first_copy)
    if config.quality_rules:
        rules = RULE_SETS[config.quality_rules]
        keep(f"{config.quality_rules} quality rules", lambda d: passes(d.text, rules))
    if config.near_duplicates:
        kept = {id(docs[i]) for i in drop_near_duplicates([d.text for d in docs],
                                                          config.near_duplicates)}
        keep(f"near duplicates (MinHash-LSH, Jaccard >= {config.near_duplicates})",
             lambda d: id(d) in kept)
    return docs, report
