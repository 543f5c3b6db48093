"""Install the course into the Python that is running, keeping its PyTorch: what the first cell of
every lab does on Colab, Kaggle or any Jupyter where `llmlab` is missing.

Hosted notebooks come with a CUDA build of PyTorch that matches their GPU driver. The course's
pins (constraints.txt) would replace it with another build, several GB that may not run there, so
here torch is pinned to the version already installed, and Triton, which comes with torch's CUDA
build, is left to it. A torch older than the oldest the course is tested with (pyproject.toml) is
refused before anything is installed, with what to do.

It then says where the labs keep what they build for each other (llmlab's own answer: Google
Drive when it is mounted, else a folder that is lost with the runtime), and when the runtime must
be restarted: a package the notebook had already imported changed version under it.

Like install.py it runs before the course's packages exist: the standard library only.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from install import ROOT, python_problem  # noqa: E402 (the folder above is not a package)

EXTRAS = "course,extras"  # what the labs use; the test tools stay out of a learner's runtime
# Pins that the platform's torch decides: its CUDA build brings the Triton it was built with.
LEFT_TO_TORCH = ("triton",)
# Asked of a new Python: this one may hold modules of the versions just replaced.
WHERE_ARTIFACTS = "from llmlab.recipes import where_artifacts_live; print(where_artifacts_live())"


def version_tuple(version: str) -> tuple[int, ...]:
    """(2, 10, 0) from '2.10.0+cu128' or '2.10.0a0': the release numbers only."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def oldest_torch(root: Path = ROOT) -> str:
    """The oldest torch the course is tested with: the `torch>=` bound in pyproject.toml."""
    found = re.search(r'"torch>=([\d.]+)', (root / "pyproject.toml").read_text(encoding="utf-8"))
    if not found:
        raise SystemExit("pyproject.toml states no `torch>=` bound: add the oldest tested torch")
    return found.group(1)


def torch_problem(installed: str, oldest: str) -> str | None:
    """Why the course cannot run on this torch, or None when it can."""
    if version_tuple(installed) >= version_tuple(oldest):
        return None
    return (
        f"This Python has PyTorch {installed}; the course needs {oldest} or newer (the oldest it "
        f"is tested with). Choose a newer runtime, or upgrade torch (`pip install "
        f"'torch>={oldest}'`, several GB for a CUDA build), restart, and run this cell again."
    )


def constraints_keeping(torch_version: str, root: Path = ROOT) -> str:
    """constraints.txt with torch pinned to the installed version and LEFT_TO_TORCH unpinned."""
    lines = []
    for line in (root / "constraints.txt").read_text(encoding="utf-8").splitlines():
        name = line.split("#")[0].partition("==")[0].strip().lower()
        if name in LEFT_TO_TORCH:
            continue
        lines.append(f"torch=={torch_version.split('+')[0]}" if name == "torch" else line)
    return "\n".join(lines) + "\n"


def pip_command(constraints: Path, root: Path = ROOT) -> list[str]:
    """Not editable: an editable install is found only by a Python started after it."""
    return [sys.executable, "-m", "pip", "install", "--quiet", "-c", str(constraints),
            f"{root}[{EXTRAS}]"]


def changed_under_us(loaded: dict[str, object]) -> list[str]:
    """The already-imported packages whose installed version is no longer the one loaded."""
    changed = []
    for name, module in sorted(loaded.items()):
        with warnings.catch_warnings():  # some packages deprecate reading __version__
            warnings.simplefilter("ignore")
            version = getattr(module, "__version__", None)
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if isinstance(version, str) and version_tuple(version) != version_tuple(installed):
            changed.append(f"{name} {version} -> {installed}")
    return changed


def install_here(root: Path = ROOT) -> None:
    """Install the course into this Python, keeping its torch; print what to do next."""
    problem = python_problem(sys.version_info)
    if problem:
        raise SystemExit(problem)
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None  # nothing to keep: the pinned torch comes with the rest
    if torch_version is not None:
        problem = torch_problem(torch_version, oldest_torch(root))
        if problem:
            raise SystemExit(problem)
        print(f"Installing the course and its pinned packages, keeping PyTorch {torch_version} "
              "(a few minutes)")
    loaded = {name: module for name, module in sys.modules.items() if "." not in name}
    with tempfile.TemporaryDirectory() as folder:
        constraints = Path(folder) / "constraints.txt"
        constraints.write_text(constraints_keeping(torch_version, root) if torch_version
                               else (root / "constraints.txt").read_text(encoding="utf-8"))
        command = pip_command(constraints, root)
        if subprocess.run(command).returncode != 0:
            raise SystemExit(f"pip failed (its message is above): {' '.join(command)}")
    importlib.invalidate_caches()  # so this Python finds the packages just installed
    subprocess.run([sys.executable, "-c", WHERE_ARTIFACTS])
    changed = changed_under_us(loaded)
    if changed:
        print("Restart the runtime now (Colab: Runtime > Restart session), then run the notebook "
              f"from the top: packages this notebook had imported changed ({', '.join(changed)}).")
    else:
        print("Installed: run the next cells.")


if __name__ == "__main__":
    install_here()
