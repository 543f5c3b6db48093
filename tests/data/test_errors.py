"""DataError is the one error type of llmlab.data, and a ValueError: code that handles bad input
(the CLI's `except ValueError`, a caller's) handles bad data too. (The messages each data
module raises it with: the tests of those modules.)"""

import ast
from pathlib import Path

import pytest

import llmlab.data
from llmlab.data.errors import DataError


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
