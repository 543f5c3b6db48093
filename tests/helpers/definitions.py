"""Finding where llmlab computes a concept, by reading its source: the calls that compute it,
each named by its file and enclosing function, so a test can say the concept has one home."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "llmlab"


def calls(package: Path, names: set[str], mentioning: str | None = None) -> list[str]:
    """'llmlab/a/b.py:function' for every call of a function or method named one of `names`
    (`F.cross_entropy` and `cross_entropy` alike) in the package, and, with `mentioning` (a
    regular expression), only those whose source text matches it."""
    found = []
    for path in sorted(package.rglob("*.py")):
        finder = _CallFinder(names, mentioning)
        finder.visit(ast.parse(path.read_text(encoding="utf-8")))
        found += [f"{path.relative_to(package.parent)}:{where}" for where in finder.found]
    return found


class _CallFinder(ast.NodeVisitor):
    def __init__(self, names: set[str], mentioning: str | None):
        self.names, self.mentioning = names, mentioning
        self.scope: list[str] = []
        self.found: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in self.names and (
            self.mentioning is None or re.search(self.mentioning, ast.unparse(node))
        ):
            self.found.append(".".join(self.scope) or "<module>")
        self.generic_visit(node)


def mode_toggles(package: Path) -> list[str]:
    """'llmlab/a/b.py:function' for every function that switches a model to eval mode and back
    to training itself (calls both `.eval()` and `.train(...)`): llmlab.models.eval_mode's job."""
    to_eval = set(calls(package, {"eval"}, mentioning=r"\.eval\(\)"))
    return sorted(to_eval & set(calls(package, {"train"}, mentioning=r"\.train\(")))


def module_names(package: Path, pattern: str) -> list[str]:
    """'llmlab/a/b.py:NAME' for every name a module of the package assigns at its top level
    (a table, a constant) that matches `pattern`, a regular expression."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign):
                targets = node.targets
            else:  # x: T = ... and x += ...; anything else has no target
                targets = [getattr(node, "target", None)]
            names = [t.id for t in targets if isinstance(t, ast.Name) and re.search(pattern, t.id)]
            found += [f"{path.relative_to(package.parent)}:{name}" for name in names]
    return found
