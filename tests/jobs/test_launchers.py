"""The launcher table: one row per launcher, and every llmlab helper it names exists."""

import importlib
import importlib.util

import pytest

from llmlab.jobs.launchers import LAUNCHERS, launcher_table


def helper(name: str):
    """The function a helper name stands for, in llmlab.distributed or llmlab.jobs; None if
    neither has it."""
    module, attribute = name.rsplit(".", 1)
    for package in ("llmlab.distributed", "llmlab.jobs"):
        if importlib.util.find_spec(f"{package}.{module}"):
            return getattr(importlib.import_module(f"{package}.{module}"), attribute, None)
    return None


@pytest.mark.parametrize("row", LAUNCHERS, ids=lambda row: row.name)
def test_every_helper_named_exists(row):
    for name in row.helpers:
        assert callable(helper(name)), f"{row.name}: no {name} in llmlab.distributed or jobs"


def test_a_missing_helper_is_caught():
    assert helper("slurm.no_such_function") is None and helper("no_such_module.f") is None


def test_the_table_has_a_row_per_launcher():
    lines = launcher_table().splitlines()
    assert lines[0].split(" | ")[0] == "launcher" and len(lines) == 2 + len(LAUNCHERS)
    names = [row.name for row in LAUNCHERS]
    assert len(set(names)) == len(names)
    for wanted in ("torchrun, one node", "notebook_launcher", "deepspeed", "horovodrun"):
        assert wanted in names
