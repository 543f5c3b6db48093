"""tools/install_here.py, which the first cell of every lab runs on Colab or Kaggle: it keeps the
platform's torch (pinned to the installed version, Triton left to it), refuses a torch older than
pyproject.toml's bound before installing anything, and says when to restart. pip is faked."""

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("install_here", ROOT / "tools" / "install_here.py")
install_here = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_here)

OLDEST = install_here.oldest_torch()


def older(version: str) -> str:
    major, minor = map(int, version.split(".")[:2])
    return f"{major}.{minor - 1}.1"


@pytest.mark.parametrize(("text", "numbers"), [
    ("2.10.0", (2, 10, 0)), ("2.10.0+cu128", (2, 10, 0)), ("2.11.0a0+git1234", (2, 11, 0)),
    ("2.9", (2, 9)),
])
def test_versions_compare_by_their_release_numbers(text, numbers):
    assert install_here.version_tuple(text) == numbers


def test_the_oldest_torch_is_pyprojects_bound():
    assert f'"torch>={OLDEST}' in (ROOT / "pyproject.toml").read_text()
    assert install_here.torch_problem(f"{OLDEST}.0+cu126", OLDEST) is None
    assert install_here.torch_problem("2.13.0", OLDEST) is None
    problem = install_here.torch_problem(older(OLDEST), OLDEST)
    assert problem and f"needs {OLDEST} or newer" in problem and "restart" in problem


def test_the_constraints_keep_the_installed_torch_and_leave_triton_to_it():
    original = (ROOT / "constraints.txt").read_text().splitlines()
    kept = install_here.constraints_keeping("2.10.0+cu128").splitlines()
    assert "torch==2.10.0" in kept and not any(line.startswith("triton") for line in kept)
    changed = [line for line in original if line not in kept]
    assert sorted(changed) == sorted(line for line in original
                                     if re.match(r"(torch|triton)==", line))


@pytest.fixture
def runtime(monkeypatch):
    """A Python with torch `runtime.torch` (None: none); pip only records its commands."""
    machine = SimpleNamespace(torch="2.13.0", commands=[], constraints=[], pip_code=0)
    real_version = importlib.metadata.version

    def version(name):
        if name != "torch":
            return real_version(name)
        if machine.torch is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return machine.torch

    def run(command, **kwargs):
        machine.commands.append(command)
        if "pip" in command:
            machine.constraints.append(Path(command[command.index("-c") + 1]).read_text())
            return SimpleNamespace(returncode=machine.pip_code)
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(install_here.importlib.metadata, "version", version)
    monkeypatch.setattr(install_here.subprocess, "run", run)
    return machine


def test_a_hosted_torch_is_kept_and_the_course_installed_with_its_extras(runtime, capsys):
    runtime.torch = "2.13.0+cu126"
    install_here.install_here()
    pip, where = runtime.commands
    assert pip[:3] == [sys.executable, "-m", "pip"] and pip[-1] == f"{ROOT}[course,extras]"
    assert "torch==2.13.0" in runtime.constraints[0].splitlines()
    assert where[:2] == [sys.executable, "-c"] and "where_artifacts_live" in where[2]
    assert "keeping PyTorch 2.13.0+cu126" in capsys.readouterr().out


def test_a_torch_too_old_is_refused_before_anything_is_installed(runtime):
    runtime.torch = older(OLDEST)
    with pytest.raises(SystemExit, match=f"needs {OLDEST} or newer"):
        install_here.install_here()
    assert runtime.commands == []


def test_without_torch_the_pinned_one_is_installed(runtime):
    runtime.torch = None
    install_here.install_here()
    assert runtime.constraints[0] == (ROOT / "constraints.txt").read_text()


def test_a_failed_pip_is_an_error_naming_the_command(runtime):
    runtime.pip_code = 1
    with pytest.raises(SystemExit, match="pip failed"):
        install_here.install_here()


def test_a_package_imported_before_the_install_and_changed_by_it_asks_for_a_restart():
    numpy_now = importlib.metadata.version("numpy")
    stale = SimpleNamespace(__version__="1.0.0")
    current = SimpleNamespace(__version__=numpy_now)
    assert install_here.changed_under_us({"numpy": stale}) == [f"numpy 1.0.0 -> {numpy_now}"]
    assert install_here.changed_under_us({"numpy": current}) == []
    assert install_here.changed_under_us({"not_a_distribution": stale}) == []
