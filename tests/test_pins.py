"""The pins live in constraints.txt; every other place that names a version must agree with it."""

import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def read_constraints() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def pyproject_requirements(*groups: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for group in groups:
        lines += project["optional-dependencies"][group]
    return [Requirement(line) for line in lines]


def conda_pip_pins(path: Path) -> dict[str, Version]:
    """name -> version of the `name==version` lines in a conda file's pip section."""
    dependencies = yaml.safe_load(path.read_text())["dependencies"]
    pip_section = next(item["pip"] for item in dependencies if isinstance(item, dict))
    pins = {}
    for line in pip_section:
        if "==" in line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            pins[canonicalize_name(requirement.name)] = Version(spec.version)
    return pins


def test_constraints_pin_every_direct_dependency_inside_its_range():
    pins = read_constraints()
    for requirement in pyproject_requirements("course", "extras", "dev"):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is a dependency but constraints.txt does not pin it"
        assert pins[name] in requirement.specifier, f"{name}=={pins[name]} not in {requirement}"


def test_constraints_pin_torch_without_a_build_label():
    """A bare 2.13.0 lets pip take the CPU wheel here and the CUDA wheel on a GPU VM."""
    assert read_constraints()["torch"].local is None


@pytest.mark.parametrize(
    "path, groups",
    [("environment.yml", ("course", "extras", "dev")), ("binder/environment.yml", ("course",))],
)
def test_conda_files_agree_with_constraints(path, groups):
    pins, conda = read_constraints(), conda_pip_pins(ROOT / path)
    for requirement in pyproject_requirements(*groups):
        name = canonicalize_name(requirement.name)
        assert name in conda, f"{path} does not install {name}"
    for name, version in conda.items():
        # Binder's torch carries the +cpu label; the release itself must match.
        assert Version(version.public) == pins[name], f"{path}: {name}=={version} != {pins[name]}"


def test_binder_takes_the_cpu_build_of_torch():
    assert conda_pip_pins(ROOT / "binder/environment.yml")["torch"].local == "cpu"


def test_nvml_bindings_are_a_pinned_dependency():
    """GPU utilisation, memory and power come from NVML (`import pynvml`): installed everywhere."""
    names = {canonicalize_name(requirement.name) for requirement in pyproject_requirements()}
    assert "nvidia-ml-py" in names and "nvidia-ml-py" in read_constraints()
