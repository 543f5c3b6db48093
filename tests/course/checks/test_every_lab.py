"""Every lab's checks pass on the solution notebook's functions and, on the generated lab's stubs,
fail with "not done yet". (Each test_labNN.py beside it adds the likely mistakes of its lab.)"""

import importlib
import pkgutil
from pathlib import Path

import pytest

import llmlab.course.checks
from llmlab.course.notebook_code import load_definitions

ROOT = Path(__file__).resolve().parents[3]
MODULES = [
    importlib.import_module(f"llmlab.course.checks.{info.name}")
    for info in pkgutil.iter_modules(llmlab.course.checks.__path__)
    if info.name.startswith("lab")  # the labs' checks; judge.py is what they share
]


def written(module) -> list[str]:
    """The exercises whose cell the notebook has (a check can land a round before its cell)."""
    return [name for name in module.EXERCISES if name not in
            getattr(module, "NOT_IN_NOTEBOOK_YET", ())]


CASES = [(module, name) for module in MODULES for name in written(module)]


def case_id(case) -> str:
    module, name = case
    return f"{module.NOTEBOOK}:{name}"


def definitions(folder: str, module) -> dict:
    path = ROOT / folder / module.NOTEBOOK
    if not path.exists():  # the checks can land a round before their lab's notebook
        pytest.skip(f"{folder}/{module.NOTEBOOK} is not written yet")
    # HELPERS: other definitions of the notebook that an exercise's function calls.
    names = [*written(module), *getattr(module, "HELPERS", ())]
    return load_definitions(path, names)


def test_every_exercise_check_is_registered():
    for module in MODULES:
        checks = {name for name in vars(module) if name.startswith("exercise_")}
        registered = {check.__name__ for check in module.EXERCISES.values()}
        assert checks == registered, f"{module.__name__}: EXERCISES misses {checks - registered}"
        undecorated = [c for c in registered if not hasattr(getattr(module, c), "__wrapped__")]
        assert not undecorated, f"{module.__name__}: not wrapped by @exercise: {undecorated}"


def test_an_exercise_waiting_for_its_cell_is_not_in_the_notebook_yet():
    for module in MODULES:
        waiting = getattr(module, "NOT_IN_NOTEBOOK_YET", ())
        assert set(waiting) <= set(module.EXERCISES), module.__name__
        path = ROOT / "solutions" / module.NOTEBOOK
        for name in waiting if path.exists() else ():
            with pytest.raises(LookupError):  # it is there: take it off NOT_IN_NOTEBOOK_YET
                load_definitions(path, [name])


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_check_passes_on_the_solution(case, capsys):
    module, name = case
    module.EXERCISES[name](definitions("solutions", module)[name])
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_check_on_the_stub_says_it_is_not_done_and_lets_the_lab_go_on(case, capsys):
    module, name = case
    stub = definitions("labs", module)[name]
    returned = module.EXERCISES[name](stub)
    assert "not done yet" in capsys.readouterr().out
    assert returned is not stub  # llmlab's version, or a function that says what to finish
