"""Cleaning: the normalization rules, and the report of what every step removed."""

import random

import pytest

from llmlab.data.clean import CleaningConfig, clean_documents, normalize_text
from llmlab.data.dedup import plant_near_duplicates
from llmlab.data.documents import Document


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("cafe\u0301", "café"),  # decomposed accent composed (NFC)
        ("a\r\nb\rc\n", "a\nb\nc\n"),  # Windows and old Mac line ends
        ("bell\x07 and nul\x00 and del\x7f", "bell and nul and del"),
        ("keep\ttabs\n    and indentation  \n", "keep\ttabs\n    and indentation\n"),
        ("trailing \x07\n", "trailing\n"),  # a control char hiding trailing spaces
        ("ﬁne", "ﬁne"),  # NFC keeps the ligature; NFKC would not
    ],
)
def test_normalize_text(raw, clean):
    assert normalize_text(raw) == clean


def test_nfkc_folds_compatibility_characters():
    assert normalize_text("ﬁne １２３", form="NFKC") == "fine 123"


def _doc(name, text):
    return Document("test", name, text)


def test_clean_documents_reports_each_step():
    long_text = "A reasonable paragraph of English text, long enough to keep. " * 3
    docs = [
        _doc("good", long_text),
        _doc("copy", long_text),
        _doc("short", "tiny"),
        _doc("table", "0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b"),
        _doc("broken", "\ufffd" + long_text.replace("A ", "B ")),
        _doc("dos", long_text.replace(". ", ".\r\n")),
    ]
    kept, report = clean_documents(docs)
    assert [d.name for d in kept] == ["good", "broken", "dos"]
    steps = {s.step.split(" (")[0]: s for s in report.steps}
    assert steps["undecodable bytes"].chars_removed == 1
    assert steps["normalize"].chars_removed == 3 + 3  # three CRs, three final trailing spaces
    assert steps["too short"].documents_removed == 1
    assert steps["low quality"].documents_removed == 1
    assert steps["exact duplicates"].documents_removed == 1
    assert report.documents_out == 3
    assert report.chars_out == sum(len(d.text) for d in kept)
    assert "kept" in report.table().splitlines()[-1]


def test_lowercase_is_off_by_default_and_optional():
    docs = [_doc("a", "Mixed Case Text That Is Long Enough To Pass The Length Filter Easily.")]
    assert clean_documents(docs)[0][0].text == docs[0].text
    kept, report = clean_documents(docs, CleaningConfig(lowercase=True))
    assert kept[0].text == docs[0].text.lower()
    assert any(s.step == "lowercase" for s in report.steps)


# Prose the Gopher rules keep (over 50 words, stop words, few symbols), each a different random
# draw of words, so no two share many 5-word shingles.
WORDS = ("the of and to with that have river rain hills water town valley farms mills stone "
         "gardens summer people channel reader notes season harvest market bridge").split()
PROSE = [" ".join(random.Random(n).choices(WORDS, k=80)) + "." for n in range(12)]
CODE = "def add(a, b):\n    return {a: b}\n" * 6  # few words, no stop words, braces


def test_quality_rules_and_near_duplicates_are_off_by_default():
    kept, report = clean_documents([_doc(f"p{i}", t) for i, t in enumerate(PROSE)]
                                   + [_doc("code", CODE)])
    assert len(kept) == 13
    assert not [s for s in report.steps if "quality rules" in s.step or "near" in s.step]


def test_gopher_rules_remove_what_fails_them_and_keep_prose():
    docs = [_doc(f"p{i}", t) for i, t in enumerate(PROSE)] + [_doc("code", CODE)]
    kept, report = clean_documents(docs, CleaningConfig(quality_rules="gopher"))
    assert [d.name for d in kept] == [f"p{i}" for i in range(12)]
    assert report.steps[-1].step == "gopher quality rules"
    assert report.steps[-1].documents_removed == 1


def test_near_copies_are_dropped_and_the_first_of_each_kept():
    texts, planted = plant_near_duplicates(PROSE, copies=3, shares=[0.02], seed=1)
    docs = [_doc(f"d{i}", t) for i, t in enumerate(texts)]
    kept, report = clean_documents(docs, CleaningConfig(near_duplicates=0.7))
    copies = {j for _, j in planted}
    assert {d.name for d in kept} == {f"d{i}" for i in range(len(texts)) if i not in copies}
    assert report.steps[-1].step == "near duplicates (MinHash-LSH, Jaccard >= 0.7)"
    assert report.steps[-1].documents_removed == 3


@pytest.mark.parametrize("changes, words", [
    ({"quality_rules": "fineweb"}, "unknown quality rules 'fineweb'"),
    ({"near_duplicates": 1.0}, "Jaccard similarity in .0, 1."),
    ({"near_duplicates": -0.5}, "Jaccard similarity"),
])
def test_bad_cleaning_settings_are_refused(changes, words):
    with pytest.raises(ValueError, match=words):
        CleaningConfig(**changes)
