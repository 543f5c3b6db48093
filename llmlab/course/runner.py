"""Run the course headless: execute every solution notebook and print a table of results."""

import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from traitlets.config import Config

from llmlab.course.headline import HEADLINE_VARIABLE
from llmlab.course.profiles import ENV_VARIABLE, explicit_profile
from llmlab.tables import markdown_table


@dataclass(frozen=True)
class LabRun:
    notebook: str
    ok: bool
    seconds: float
    headline: str  # the lab's headline figure, or the error when it failed


@contextmanager
def _environment(**values: str):
    """Set environment variables for the kernel (it inherits them) and restore them after."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _kernel_over_unix_sockets(folder: Path) -> Config:
    """Talk to the kernel through Unix sockets in `folder` instead of TCP on localhost.

    Other users of the machine cannot connect to them, and ipykernel no longer warns at every
    kernel start that it is "running over TCP without encryption". The folder is the run's own:
    without it the sockets would be `./kernel-ipc-N`, shared by two runs in one folder.
    """
    return Config(KernelManager={"transport": "ipc", "ip": str(folder / "kernel")})


def run_notebook(path: Path, out_dir: Path, profile_name: str, timeout_s: int = 1800,
                 threads: int | None = None) -> LabRun:
    """Execute one notebook in its own folder; write the executed copy to out_dir.

    With out_dir == the notebook's folder this stores fresh outputs in the notebook itself
    (`make solutions` does that with the smoke profile, before a commit). `threads` pins the
    kernel's math threads (OMP_NUM_THREADS, which PyTorch and ONNX Runtime read at start), so
    every lab's timings of one run come from the same setting.
    """
    notebook = nbformat.read(path, as_version=4)
    scratch = Path(tempfile.mkdtemp(prefix="llmlab-"))  # the headline file and the kernel's sockets
    headline_file = scratch / "headline.json"
    client = NotebookClient(
        notebook, timeout=timeout_s, kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        config=_kernel_over_unix_sockets(scratch),
    )
    start = time.perf_counter()
    pinned = {"OMP_NUM_THREADS": str(threads)} if threads else {}
    with _environment(**{ENV_VARIABLE: profile_name, HEADLINE_VARIABLE: str(headline_file)},
                      **pinned):
        try:
            client.execute()
            ok, summary = True, "(no headline)"
        except CellExecutionError as error:
            ok, summary = False, f"FAILED: {str(error).strip().splitlines()[-1][:120]}"
        # not CellExecutionErrors: uncaught, they stopped the course and skipped the labs after
        except CellTimeoutError:
            ok, summary = False, f"FAILED: a cell ran past the {timeout_s} s limit"
        except DeadKernelError as error:
            ok, summary = False, f"FAILED: the kernel died (out of memory?): {str(error)[:80]}"
    seconds = time.perf_counter() - start
    nbformat.write(notebook, out_dir / path.name)
    if ok and headline_file.exists():
        summary = json.loads(headline_file.read_text(encoding="utf-8"))["headline"]
    shutil.rmtree(scratch, ignore_errors=True)
    return LabRun(path.name, ok, seconds, summary)


def find_notebooks(solutions: Path, only: list[str] | None = None) -> list[Path]:
    """The lab notebooks in `solutions`, or those whose names start with one of `only`."""
    if not solutions.is_dir():
        raise ValueError(f"{solutions}: no such folder; run from the course's root folder, "
                         "or pass the folder with --solutions")
    notebooks = sorted(solutions.glob("[0-9][0-9]_*.ipynb"))
    if not notebooks:
        raise ValueError(f"{solutions} holds no lab notebooks (named like 00_environment.ipynb)")
    if any(not prefix.strip() for prefix in only or []):  # "" starts every name: all labs
        raise ValueError(f"--only {' '.join(map(repr, only))}: an empty prefix names no lab; "
                         "give lab numbers such as 00 03")
    unmatched = [p for p in only or [] if not any(nb.name.startswith(p) for nb in notebooks)]
    if unmatched:
        prefixes, labs = ", ".join(map(repr, unmatched)), ", ".join(nb.stem for nb in notebooks)
        raise ValueError(f"no notebook in {solutions} starts with {prefixes}; "
                         f"the labs there are {labs}")
    return [nb for nb in notebooks if not only or nb.name.startswith(tuple(only))]


def run_course(
    solutions: Path,
    out_dir: Path,
    profile_name: str = "auto",
    only: list[str] | None = None,
    threads: int | None = None,
) -> list[LabRun]:
    """Run every solution notebook (or those whose name starts with one of `only`), each kernel
    with `threads` math threads if given."""
    if threads is not None and threads < 1:
        raise ValueError(f"threads={threads}: give 1 or more math threads per kernel")
    named = explicit_profile(profile_name)
    notebooks = find_notebooks(solutions, only)
    out_dir.mkdir(parents=True, exist_ok=True)
    # "auto" reaches the kernels as it is, so that each lab's profile("auto", lab=N) applies its
    # own rule (Lab 03 needs more GPU memory than Lab 00).
    how = str(named) if named else "profile 'auto': each lab's rule picks (see `llmlab doctor`)"
    pinned = f", {threads} math thread(s) each" if threads else ""
    print(f"Running {len(notebooks)} lab(s) with {how}{pinned}; executed notebooks go to "
          f"{out_dir}/")
    runs = []
    for number, path in enumerate(notebooks, start=1):
        print(f"[{number}/{len(notebooks)}] {path.name} ...", flush=True)
        runs.append(run_notebook(path, out_dir, named.name if named else "auto", threads=threads))
    return runs


def format_table(runs: list[LabRun]) -> str:
    return markdown_table([{"lab": run.notebook, "status": "ok" if run.ok else "FAILED",
                            "wall time": f"{run.seconds:.1f} s", "headline": run.headline}
                           for run in runs], aligned=True)
