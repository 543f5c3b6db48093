"""The launcher table: one row per launcher, and every llmlab helper it names exists."""

import importlib

import pytest

from llmlab.distributed.launchers import LAUNCHERS, launcher_table


@pytest.mark.parametrize("row", LAUNCHERS, ids=lambda row: row.name)
def test_every_helper_named_exists(row):
    for name in row.helpers:
        module, attribute = name.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(f"llmlab.distributed.{module}"),
                                attribute, None)), f"{row.name}: no llmlab.distributed.{name}"


def test_the_table_has_a_row_per_launcher():
    lines = launcher_table().splitlines()
    assert lines[0].split(" | ")[0] == "launcher" and len(lines) == 2 + len(LAUNCHERS)
    names = [row.name for row in LAUNCHERS]
    assert len(set(names)) == len(names)
    for wanted in ("torchrun, one node", "notebook_launcher", "deepspeed", "horovodrun"):
        assert wanted in names
