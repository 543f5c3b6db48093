"""Every package of llmlab shows one kind of face, its __init__.py: a docstring that says what is
inside, the names a user imports re-exported from the package's own modules, and `__all__`
listing exactly those. No code: a learner who opens a package's face finds where things live, and
finds each definition in a module named for it. (llmlab/__init__.py is the one exception: it runs
the start-up every import of llmlab needs, before anything else is imported.)"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "llmlab"


def face_problems(path: Path, package: Path = PACKAGE) -> list[str]:
    """What keeps a package's __init__.py from being a face: code, a name imported from outside
    the package, no docstring, or an `__all__` that is not exactly the names re-exported."""
    dotted = ".".join(path.parent.relative_to(package.parent).parts)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    problems = [] if ast.get_docstring(tree) else ["no docstring saying what the package holds"]
    body = tree.body[1:] if ast.get_docstring(tree) else tree.body
    imported, listed = [], None
    for node in body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(dotted + "."):
            imported += [alias.asname or alias.name for alias in node.names]
        elif isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            listed = ast.literal_eval(node.value)
        else:
            problems.append(f"line {node.lineno} is not a re-export from {dotted}'s own modules: "
                            "move it into a module of the package and re-export its names")
    if listed is None:
        problems.append("no __all__ listing the names it re-exports")
    elif sorted(listed) != sorted(imported):
        differ = sorted(set(listed) ^ set(imported))
        problems.append(f"__all__ is not the names it imports: {differ} differ")
    return problems


def faces(package: Path = PACKAGE) -> dict[str, list[str]]:
    return {path.relative_to(package.parent).as_posix(): face_problems(path, package)
            for path in sorted(package.rglob("__init__.py"))
            if path != package / "__init__.py"}


def test_every_package_face_re_exports_its_modules_names_and_holds_no_code():
    assert {face: problems for face, problems in faces().items() if problems} == {}
