"""tests/ mirrors llmlab/, so the tests of a module are found at once: those of `llmlab/a/b.py` are
in `tests/a/test_b.py` (a long one split by aspect into `tests/a/test_b_<aspect>.py`), every test
file sits at the path of a module it tests, and no test file imports another: what tests share
lives in `tests/helpers/` (CONTRIBUTING.md)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE, TESTS = ROOT / "llmlab", ROOT / "tests"
HELPERS = "helpers"

# Modules without a test file of their own, and why. A module that gets one must leave this list
# (the test says so), and a new module must not join it without a reason.
UNTESTED = {
    "__main__": "two lines that hand over to cli.main (tests/test_cli*.py run the CLI)",
    "_quiet": "silences third-party warnings at import; every test imports through it",
}

# Test files about the project rather than one module.
PROJECT_TESTS = {
    "test_layers.py": "the layer order of all of llmlab",
    "test_package_faces.py": "every package's __init__.py: re-exports and __all__, no code",
    "test_layout_of_tests.py": "this file: the layout of tests/",
    "test_pins.py": "constraints.txt against every other place that names a version",
    "test_install.py": "tools/install.py, outside the package",
    "test_install_here.py": "tools/install_here.py (Colab and Kaggle), outside the package",
    "test_test_timeline.py": "tools/test_timeline.py (the test run's timeline), outside it",
    "test_sync.py": "labs/ is what the generator makes from solutions/",
    "test_markdown.py": "the notebooks' and the README's markdown renders everywhere",
    "test_throwaway_files.py": "every notebook removes the temporary folders it makes",
    "course/checks/test_every_lab.py": "every labNN check module against its notebooks",
}


def package_modules() -> set[str]:
    """Dotted names below llmlab of the modules that hold code: `data.atomic`, `tables`; a
    package's `__init__.py` only when it defines something (most are faces that re-export)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            tree = ast.parse(path.read_text())
            if not any(isinstance(node, ast.FunctionDef | ast.ClassDef) for node in tree.body):
                continue
            parts = parts[:-1]
        if parts:
            names.add(".".join(parts))
    return names


def files_of_tests() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if HELPERS not in p.relative_to(TESTS).parts)


def mirrored(module: str) -> tuple[Path, str]:
    """The folder of a module's tests and the stem its test files start with."""
    *folders, name = module.split(".")
    return TESTS.joinpath(*folders), f"test_{name}"


def has_tests(module: str) -> bool:
    folder, stem = mirrored(module)
    return (folder / f"{stem}.py").exists() or any(folder.glob(f"{stem}_*.py"))


def test_every_module_has_its_tests_at_the_mirrored_path():
    modules = package_modules()
    missing = sorted(m for m in modules if not has_tests(m) and m not in UNTESTED)
    assert not missing, (
        "these modules have no tests at their mirrored path (llmlab/a/b.py -> tests/a/test_b.py): "
        f"{missing}; write them, or list the module in UNTESTED with the reason")
    stale = sorted(m for m in UNTESTED if m not in modules or has_tests(m))
    assert not stale, f"UNTESTED lists modules that are gone or now tested: {stale}"


def test_every_test_file_sits_at_the_path_of_a_module_it_tests():
    modules = package_modules()
    misplaced = []
    for path in files_of_tests():
        relative = path.relative_to(TESTS)
        if relative.as_posix() in PROJECT_TESTS:
            continue
        tested = [m for m in modules if mirrored(m)[0] == path.parent
                  and (path.stem == mirrored(m)[1] or path.stem.startswith(mirrored(m)[1] + "_"))]
        if not tested:
            misplaced.append(relative.as_posix())
    assert not misplaced, (
        f"{misplaced} do not sit at the path of a module they test: tests/a/test_b.py holds the "
        "tests of llmlab/a/b.py (tests/a/test_b_<aspect>.py a part of them)")


def test_helpers_live_in_the_helpers_folder():
    stray = sorted(p.relative_to(TESTS).as_posix() for p in TESTS.rglob("*.py")
                   if HELPERS not in p.relative_to(TESTS).parts
                   and not p.name.startswith("test_") and p.name != "conftest.py")
    assert not stray, f"{stray}: shared helpers and worker scripts go in tests/{HELPERS}/"


def imported_top_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            names.add(".")  # relative: tests/ holds no packages but helpers
    return names


def test_no_test_file_imports_another_test_file():
    offenders = {}
    for path in TESTS.rglob("*.py"):
        wrong = {n for n in imported_top_names(path)
                 if n.startswith("test_") or n in ("conftest", "tests", ".")}
        if wrong:
            offenders[path.relative_to(TESTS).as_posix()] = sorted(wrong)
    assert not offenders, (
        f"test files import other test files: {offenders}; move what they share into "
        f"tests/{HELPERS}/ and import it as {HELPERS}.<module>")
