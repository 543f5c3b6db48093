"""Create, update or reuse the course's environment: `python3 tools/install.py .venv`.

Every `make` target runs this first, with the Python that should own the environment
(`make PYTHON=python3.12 ...` picks another). It

1. refuses a Python older than 3.11, before touching anything (the pinned numpy, pandas and
   networkx releases need 3.11);
2. rebuilds the environment when another Python made it, or when an earlier install did not
   finish (no stamp file);
3. on Linux without an NVIDIA driver, installs PyTorch's CPU build from PyTorch's CPU wheel index
   (PyPI's Linux torch is the CUDA build: several GB of CUDA libraries that such a machine cannot
   use); with a driver, or on macOS, PyPI's torch is the right build;
4. installs the pinned stack and writes the stamp, a hash of the pin files: an unchanged
   environment is reused in well under a second, and changed pins update it in place.

It runs before the environment exists, so it uses the standard library only and keeps to syntax
that old Pythons can parse, so they get the one-line error of step 1 rather than a SyntaxError.
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIN_PYTHON = (3, 11)
PIN_FILES = ("constraints.txt", "pyproject.toml")
EXTRAS = "course,extras,dev"
STAMP = ".installed"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
NVIDIA_PROC = Path("/proc/driver/nvidia/version")
# A machine that cannot reach PyTorch's index (a closed network with a local wheel) should not
# wait through pip's five retries with back-off on every install.
INDEX_RETRIES = ("--retries", "1", "--timeout", "30")


def dotted(version, parts: int = 2) -> str:
    """'3.11' from (3, 11, 7, 'final', 0) or from '3.11.7'."""
    if isinstance(version, str):
        version = version.split(".")
    return ".".join(str(part) for part in tuple(version)[:parts])


def python_problem(version: tuple) -> str | None:
    """Why this Python cannot build the environment, or None when it can."""
    if tuple(version[:2]) >= MIN_PYTHON:
        return None
    return (
        f"Python {dotted(version, 3)} is too old: the course needs Python 3.11 or newer. "
        "Install one and point make at it, e.g. `make PYTHON=python3.11 lab`."
    )


def venv_python_version(venv: Path) -> str | None:
    """The Python version recorded in the environment's pyvenv.cfg, or None if it has none."""
    config = venv / "pyvenv.cfg"
    if not config.is_file():
        return None
    for line in config.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        # `python -m venv` writes `version`, the virtualenv package `version_info`.
        if key.strip() in ("version", "version_info"):
            return value.strip()
    return None


def fingerprint(root: Path = ROOT) -> str:
    """What the stamp records: a hash of each file that fixes what is installed."""
    lines = []
    for name in PIN_FILES:
        lines.append(f"{name} {hashlib.sha256((root / name).read_bytes()).hexdigest()}\n")
    return "".join(lines)


def plan(venv: Path, version: tuple, expected_stamp: str) -> tuple[str, str]:
    """(action, reason): action is 'create', 'rebuild', 'update' or 'reuse'."""
    if not venv.exists():
        return "create", f"Creating {venv}"
    made_by = venv_python_version(venv)
    if made_by is None or dotted(made_by) != dotted(version):
        return "rebuild", f"Rebuilding {venv}: Python {made_by} made it, this is {dotted(version)}"
    if not venv_python(venv).exists():
        return "rebuild", f"Rebuilding {venv}: the Python that made it is gone"
    stamp = venv / STAMP
    if not stamp.is_file():
        return "rebuild", f"Rebuilding {venv}: an earlier install did not finish"
    if stamp.read_text(encoding="utf-8") != expected_stamp:
        return "update", f"Updating {venv}: {' or '.join(PIN_FILES)} changed since it was built"
    return "reuse", f"{venv} is up to date"


def has_nvidia_driver() -> bool:
    """True when an NVIDIA driver is loaded (its /proc entry) or installed (nvidia-smi)."""
    return NVIDIA_PROC.exists() or shutil.which("nvidia-smi") is not None


def torch_pip_args(system: str, nvidia_driver: bool, torch_pin: str) -> list[str]:
    """pip arguments that install PyTorch before the rest, or [] when PyPI's build is right.

    Only Linux without an NVIDIA driver needs the CPU index: PyPI's Linux wheel is the CUDA build,
    while macOS wheels are CPU (and Apple GPU) builds already.
    """
    if system != "Linux" or nvidia_driver:
        return []
    # --no-deps: torch's own dependencies come from PyPI with the rest, at their pinned versions;
    # --index-url: only torch is looked up on PyTorch's index, not every package of the course.
    return ["--no-deps", "--index-url", CPU_INDEX, *INDEX_RETRIES, f"torch=={torch_pin}+cpu"]


def pinned_version(name: str, root: Path = ROOT) -> str:
    """The version constraints.txt pins for a package."""
    for line in (root / "constraints.txt").read_text(encoding="utf-8").splitlines():
        pin, _, version = line.split("#")[0].strip().partition("==")
        if pin.lower() == name:
            return version
    raise SystemExit(f"constraints.txt pins no version of {name}: add a `{name}==...` line")


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def pip(venv: Path, args: list[str]) -> None:
    # absolute(), not resolve(): bin/python is a link to the base Python, which is not the venv.
    command = [str(venv_python(venv).absolute()), "-m", "pip", "install", "--quiet", *args]
    if subprocess.run(command, cwd=ROOT).returncode != 0:
        raise SystemExit(f"pip failed (its message is above): {' '.join(command)}")


def create_venv(venv: Path) -> None:
    """`python -m venv`, or what to install when this Python cannot make an environment."""
    if subprocess.run([sys.executable, "-m", "venv", str(venv)]).returncode != 0:
        minor = dotted(sys.version_info)
        raise SystemExit(
            f"Python {minor} could not create {venv} (its message is above). On Debian and "
            "Ubuntu the venv module is a package of its own: "
            f"`sudo apt install python{minor}-venv`, then run the same make command again (the "
            "half-made environment is rebuilt)."
        )


def install(venv: Path, stamp_text: str) -> None:
    torch_args = torch_pip_args(platform.system(), has_nvidia_driver(), pinned_version("torch"))
    if torch_args:
        print(f"No NVIDIA driver here, so PyTorch's CPU build, from {CPU_INDEX}")
        pip(venv, torch_args)
    print(f"Installing the pinned packages into {venv} (the first time takes a few minutes)")
    pip(venv, ["-c", "constraints.txt", "-e", f".[{EXTRAS}]"])
    (venv / STAMP).write_text(stamp_text, encoding="utf-8")


def main(argv: list[str]) -> None:
    problem = python_problem(sys.version_info)
    if problem:
        raise SystemExit(problem)
    venv = Path(argv[1]) if len(argv) > 1 else ROOT / ".venv"
    stamp_text = fingerprint()
    action, reason = plan(venv, sys.version_info, stamp_text)
    if action == "reuse":
        return
    print(reason)
    if action == "rebuild":
        shutil.rmtree(venv)
    if action in ("create", "rebuild"):
        create_venv(venv)
    install(venv, stamp_text)


if __name__ == "__main__":
    main(sys.argv)
