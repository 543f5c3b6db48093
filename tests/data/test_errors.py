"""DataError is the one error type of llmlab.data, and a ValueError: code that handles bad input
(the CLI's `except ValueError`, a caller's) handles bad data too. (The messages each data
module raises it with: the tests of those modules.) The Hub's refusal while offline is one
message, naming the switch and what to use instead."""

import ast
from pathlib import Path

import pytest

import llmlab.data
from llmlab.data.errors import DataError, require_online


def test_a_data_error_is_handled_as_bad_input():
    with pytest.raises(ValueError, match="shard_0.bin is damaged: delete it"):
        raise DataError("shard_0.bin is damaged: delete it")


def test_it_is_the_only_exception_class_in_the_data_package():
    def is_exception(node) -> bool:  # by its bases' names: ValueError, json.JSONDecodeError, ...
        return isinstance(node, ast.ClassDef) and any(
            ast.unparse(base).endswith(("Error", "Exception")) for base in node.bases)

    folder = Path(llmlab.data.__file__).parent
    defined = {f"{path.stem}.{node.name}" for path in folder.rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text())) if is_exception(node)}
    assert defined == {"errors.DataError"}
    assert llmlab.data.DataError is DataError


def test_the_hub_is_refused_offline_with_the_switch_and_what_to_use_instead(monkeypatch):
    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)
    with pytest.raises(DataError) as refused:
        require_online("openai/gsm8k", instead="Lab 10's dates")
    assert str(refused.value) == (
        "openai/gsm8k comes from the Hugging Face Hub and the course is offline: set "
        "LLMLAB_ONLINE=1 before starting Python (or Jupyter) to download it, or use Lab 10's "
        "dates.")
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    assert require_online("openai/gsm8k", instead="Lab 10's dates") is None
