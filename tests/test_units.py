"""The course's units have one home: every package that prints memory uses llmlab.units."""

import ast
from pathlib import Path

from llmlab.units import GB, MB

PACKAGE = Path(__file__).resolve().parents[1] / "llmlab"


def test_gb_and_mb_are_the_decimal_units_gpu_makers_use():
    assert (GB, MB) == (10**9, 10**6)


def test_no_other_module_defines_its_own_gb_or_mb():
    """A second `GB = 2**30` somewhere would make two labs disagree by 7% on the same number."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            names = {target.id for target in targets if isinstance(target, ast.Name)}
            if names & {"GB", "MB"} and path.name != "units.py":
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert found == [], f"import GB and MB from llmlab.units instead: {found}"
