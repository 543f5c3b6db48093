"""The code-summarization task: pairs cut correctly, split by module, deterministic, and a leaked
test example found. Mistakes it catches: the docstring left in the code (the answer is in the
input), a split by function (a module's functions in two splits), a split that changes from run
to run, a multi-line summary cut in half, and a planted copy of a training function missed.
The Hub version of the task needs the online switch and is tested on a local stand-in."""

import ast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llmlab.data import docstrings
from llmlab.data.docstrings import (
    SPLITS,
    docstring_splits,
    function_pairs,
    hub_docstring_pairs,
    leaked,
    split_of,
    task_prompt,
    task_target,
)
from llmlab.data.documents import Document
from llmlab.data.errors import DataError

SOURCE = '''
import os


def join_all(parts, separator=","):
    """Join the parts with a separator between them.

    More words that are not the summary.
    """
    cleaned = [str(part).strip() for part in parts]
    kept = [part for part in cleaned if part]
    return separator.join(kept)


class Store:
    @property
    def size(self):
        """Return the number of stored items."""
        total = 0
        for bucket in self.buckets:
            total += len(bucket)
        return total

    def half(self):
        """This summary line runs on
        into a second line, so it is half a sentence."""
        a = 1
        b = 2
        return a + b

    def short(self):
        """Too short."""
        x = 1
        y = 2
        return x + y


def one_liner(): "Docstring on the def line cannot be cut out."; return 1
'''


def test_pairs_hold_the_code_without_its_docstring_and_the_summary_line():
    pairs = function_pairs(SOURCE, "demo.py")
    assert [(p.name, p.summary) for p in pairs] == [
        ("join_all", "Join the parts with a separator between them."),
        ("Store.size", "Return the number of stored items."),
    ]
    for pair in pairs:
        function = ast.parse(pair.code).body[0]  # dedented: a method parses on its own
        assert ast.get_docstring(function) is None
        assert pair.summary not in pair.code and "More words" not in pair.code
        assert pair.code.startswith("def ") and pair.module == "demo.py"
    assert "return separator.join(kept)" in pairs[0].code


def test_filters_bound_the_code_length():
    assert [p.name for p in function_pairs(SOURCE, "m.py", max_code_lines=4)] == ["join_all"]
    assert function_pairs(SOURCE, "m.py", min_code_lines=6) == []
    assert len(function_pairs(SOURCE, "m.py", min_summary_words=1)) == 3  # "Too short." now in
    assert function_pairs("def broken(:\n", "m.py") == []  # other Python versions' files


def test_a_module_lands_in_one_split_whatever_else_is_there():
    assert split_of("json/decoder.py") == split_of("json/decoder.py")
    names = [f"pkg/module_{i}.py" for i in range(400)]
    counts = {name: sum(split_of(m) == name for m in names) for name in SPLITS}
    assert 280 < counts["train"] < 360 and counts["validation"] > 20 and counts["test"] > 20
    assert {split_of(m, (0, 0, 1)) for m in names} == {"test"}
    with pytest.raises(ValueError, match="sum to 1"):
        split_of("a.py", (0.8, 0.1, 0.2))


@pytest.fixture(scope="module")
def smoke_splits():
    return docstring_splits("smoke")


def shared_modules(splits):
    """Modules with functions in more than one split."""
    modules = [{p.module for p in pairs} for pairs in splits.values()]
    return (modules[0] & modules[1]) | (modules[0] & modules[2]) | (modules[1] & modules[2])


def test_standard_library_splits_share_no_module_and_repeat_exactly(smoke_splits):
    assert all(smoke_splits[name] for name in SPLITS)
    assert shared_modules(smoke_splits) == set()
    assert docstring_splits("smoke") == smoke_splits  # same pairs, same order
    # The mistake: a split by function scatters a module's functions over the splits.
    pairs = [p for split in smoke_splits.values() for p in split]
    by_function = {name: [p for p in pairs if split_of(f"{p.module}:{p.name}") == name]
                   for name in SPLITS}
    assert shared_modules(by_function)


def test_a_docstring_left_in_the_code_is_caught(monkeypatch):
    def whole_function(node, lines):  # the mistake: the answer stays in the input
        return "\n".join(lines[node.lineno - 1 : node.end_lineno])

    monkeypatch.setattr(docstrings, "_without_docstring", whole_function)
    with pytest.raises(AssertionError):
        test_pairs_hold_the_code_without_its_docstring_and_the_summary_line()


def test_a_planted_copy_of_a_training_function_is_found(smoke_splits):
    train = [p.code for p in smoke_splits["train"]]
    test = [p.code for p in smoke_splits["test"]]
    honest = leaked(train, test)
    planted = train[7].replace("self", "this")  # a near-copy: renamed, otherwise the same
    found = leaked(train, [*test, planted])
    assert found == [*honest, len(test)]
    # The mistake: looking only for exact copies misses the renamed one.
    assert len(test) not in [i for i, text in enumerate([*test, planted]) if text in set(train)]
    assert honest == []  # docstring_splits left the copies between modules out


def test_leak_detection_counts_shared_ngrams():
    train = ["a b c d e f g h i j"]
    assert leaked(train, ["a b c d e f g h i j", "z y x w v u t s", "a b c"], n=3) == [0, 2]
    assert leaked(train, ["a b c d q r s t"], n=3, threshold=0.3) == [0]  # 2 of 6 trigrams
    assert leaked(train, ["a b c d q r s t"], n=3, threshold=0.5) == []
    with pytest.raises(ValueError, match="threshold"):
        leaked(train, train, threshold=0)


def test_the_hub_task_needs_the_online_switch(monkeypatch):
    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)
    with pytest.raises(DataError, match="set LLMLAB_ONLINE=1"):
        hub_docstring_pairs()


def test_the_hub_task_with_a_local_stand_in(tmp_path, monkeypatch):
    method = SOURCE.split("class Store:\n")[1].split("    def half")[0]  # indented, decorated
    rows = {"repo": ["me/a", "me/b", "me/c"], "path": ["x.py", "y.py", "z.py"],
            "code": [SOURCE.split("\n\n\n")[1], method, "print 'python 2'"]}
    folder = tmp_path / "codexglue"
    folder.mkdir()
    pq.write_table(pa.table(rows), folder / "test.parquet")
    monkeypatch.setattr(docstrings, "HUB_TASK", (str(folder), None))
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pairs = hub_docstring_pairs("test")
    assert [(p.module, p.name) for p in pairs] == [("me/a/x.py", "join_all"), ("me/b/y.py", "size")]
    assert pairs[1].summary == "Return the number of stored items."
    assert len(hub_docstring_pairs("test", max_examples=1)) == 1


def test_copies_between_modules_leave_validation_and_test(monkeypatch):
    function = SOURCE.split("\n\n\n")[1]
    names = [f"m{i}.py" for i in range(200)]
    train_module = next(m for m in names if split_of(m) == "train")
    test_module = next(m for m in names if split_of(m) == "test")
    store = "class Store:" + SOURCE.split("class Store:")[1]
    documents = [Document("stdlib", train_module, function),
                 Document("stdlib", test_module, function + "\n\n" + store)]
    monkeypatch.setattr(docstrings, "builtin_corpus", lambda subset: documents)
    assert [p.name for p in docstring_splits()["test"]] == ["Store.size"]
    everything = docstring_splits(drop_leaked=False)
    assert [p.name for p in everything["test"]] == ["join_all", "Store.size"]


def test_the_task_as_text_ends_the_prompt_at_the_marker_and_the_target_at_a_newline(smoke_splits):
    """Generation stops at the first newline: no summary may hold one, and each target ends
    with exactly one, after the prompt's marker."""
    pair = smoke_splits["test"][0]
    text = task_prompt(pair.code) + task_target(pair.summary)
    assert text == f"{pair.code}{docstrings.PROMPT_END} {pair.summary}\n"
    summaries = [p.summary for split in smoke_splits.values() for p in split]
    assert all("\n" not in summary for summary in summaries)
    assert all(task_target(s).count("\n") == 1 for s in summaries)
