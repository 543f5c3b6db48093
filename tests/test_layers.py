"""Data flows one way through llmlab: no module imports one above it (DESIGN.md, house rules).

data -> models -> memory -> distributed -> train -> (prune, quant) -> evaluate; env, device, bench
sit underneath everything; course, plots and cli sit on top. A lower module that reached up would
make a learner read the whole package to understand one part, and would risk import cycles.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llmlab"
LAYER = {
    "_quiet": 0, "network": 0, "env": 0, "device": 0, "bench": 0,
    "data": 1, "models": 2, "memory": 3, "distributed": 4, "scale": 4, "train": 5,
    "prune": 6, "quant": 6, "evaluate": 7,
    "course": 8, "plots": 8, "cli": 8, "__main__": 8, "__init__": 8,
}  # fmt: skip


def top_module(path: Path, package: Path = PACKAGE) -> str:
    """'memory' for llmlab/memory/estimate.py, 'bench' for llmlab/bench.py."""
    return path.relative_to(package).parts[0].removesuffix(".py")


def llmlab_imports(path: Path) -> set[str]:
    """The llmlab modules a file imports, anywhere in it (imports inside functions count)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "llmlab":  # `from llmlab import memory`
                names = [f"llmlab.{alias.name}" for alias in node.names]
        found |= {name.split(".")[1] for name in names if name.startswith("llmlab.")}
    return found


def upward_imports(package: Path = PACKAGE) -> list[str]:
    problems = []
    for path in sorted(package.rglob("*.py")):
        module = top_module(path, package)
        for imported in llmlab_imports(path):
            if LAYER.get(imported, 0) > LAYER[module]:
                problems.append(f"{path.relative_to(package.parent)} imports llmlab.{imported}")
    return problems


def test_every_module_has_a_layer():
    modules = {top_module(path) for path in PACKAGE.rglob("*.py")}
    assert modules <= set(LAYER), f"give these a layer in LAYER: {sorted(modules - set(LAYER))}"


def test_no_module_imports_one_above_it():
    assert upward_imports() == []


def test_an_upward_import_is_caught(tmp_path):
    package = tmp_path / "llmlab"
    (package / "data").mkdir(parents=True)
    (package / "data" / "loaders.py").write_text("def f():\n    from llmlab.train import loop\n")
    (package / "train").mkdir()
    (package / "train" / "loop.py").write_text("from llmlab import data\n")
    assert upward_imports(package) == ["llmlab/data/loaders.py imports llmlab.train"]


@pytest.mark.parametrize("source", ["import llmlab.course.checks", "from llmlab import course"])
def test_both_import_forms_are_read(tmp_path, source):
    path = tmp_path / "llmlab" / "models" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert llmlab_imports(path) == {"course"}
