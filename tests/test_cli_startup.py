"""`llmlab --help` and argument errors answer at once: argparse's work needs neither torch nor
transformers (seconds of CPU to import), so only the commands that use them import them."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers")


def modules_imported_by(*args: str) -> tuple[set[str], subprocess.CompletedProcess]:
    """Run `python -m llmlab *args` with -X importtime: every module it imported, by name."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "llmlab", *args],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    names = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
             if line.startswith("import time:")}
    return names, result


@pytest.mark.parametrize(
    "args",
    [("--help",), ("plan", "--help"), ("estimate-memory",), ("train", "--steps", "0"),
     ("plan", "--model", "llama-7b", "--gpus", "two", "--tokens", "1e9")],
    ids=["help", "command-help", "missing-argument", "bad-number", "bad-type"],
)
def test_help_and_argument_errors_import_neither_torch_nor_transformers(args):
    names, result = modules_imported_by(*args)
    assert result.returncode == (0 if "--help" in args else 2), result.stderr[-2000:]
    assert "llmlab.cli" in names  # the parser was built: the run reached argparse
    assert not [name for name in HEAVY if name in names]
