"""Data flows one way through llmlab: no module imports one above it (DESIGN.md, house rules).

data -> models, kernels -> evaluate -> memory -> scale -> distributed -> train / jobs -> (prune,
quant, posttrain) -> inference -> recipes; env, device, units, timing, matmul, gpu_specs, tables,
network, numerics, files, profiler and vocab_sizes sit underneath everything; course, plots and cli
sit on top. The metrics (evaluate) sit just above the models and below the trainer, so the trainer,
the harnesses and every later package use the one next-token loss and perplexity; an experiment
that trains (PTQ against QAT) lives with its subject (quant). The recipes (Lab 03's model, data and
budget, the Hub switches) sit between the libraries and the course, so the CLI and the labs share
them; models never imports data. The planner (scale) is plain arithmetic below the ranks' code: it
never imports torch.distributed. The job tooling (jobs) surrounds a run: it never imports the
trainer, and only what starts runs (cli, course) imports it. A lower module that reached up would
make a learner read the whole package to understand one part, and would risk import cycles.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llmlab"
LAYER = {
    "_quiet": 0, "network": 0, "env": 0, "device": 0, "units": 0, "timing": 0, "matmul": 0,
    "gpu_specs": 0, "tables": 0, "numerics": 0, "profiler": 0, "files": 0, "vocab_sizes": 0,
    "data": 1, "models": 2, "kernels": 2,
    "evaluate": 3, "memory": 4, "scale": 5, "distributed": 6, "train": 7, "jobs": 7, "prune": 8,
    "quant": 8, "posttrain": 8, "inference": 9, "recipes": 10,
    "course": 11, "plots": 11, "cli": 11, "__main__": 11, "__init__": 11,
}
# Imports a package must not make even from below it: the planner stays plain arithmetic, the
# job tooling never imports the trainer, quantization needs nothing of pruning's (the matrices of
# a block are llmlab.models'), and a model is numbers and a builder, not a dataset (what both
# need, the profiles' vocabulary sizes, sits below both).
BANNED = {"scale": ("torch.distributed",), "jobs": ("llmlab.train",), "quant": ("llmlab.prune",),
          "models": ("llmlab.data",)}
# The job tooling surrounds a run and never runs inside it: only what starts runs imports it.
JOB_TOOLING_USERS = ("jobs", "cli", "course", "__main__")
FORBIDDEN = {
    module: BANNED.get(module, ()) + (() if module in JOB_TOOLING_USERS else ("llmlab.jobs",))
    for module in LAYER
}


# What builds a launcher's command line and runs it (subprocess, psutil): llmlab.jobs' job tooling.
JOB_TOOLING = ("torchrun_command", "deepspeed_command", "write_hostfile", "free_port",
               "run_script", "run_command", "kill_process_tree")


def top_module(path: Path, package: Path = PACKAGE) -> str:
    """'memory' for llmlab/memory/estimate.py, 'tables' for llmlab/tables.py."""
    return path.relative_to(package).parts[0].removesuffix(".py")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, anywhere in it (imports inside functions count); `from a
    import b` counts as a.b too, since b may be a submodule."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def llmlab_imports(path: Path) -> set[str]:
    """The llmlab modules a file imports: 'memory' for llmlab.memory.estimate."""
    return {name.split(".")[1] for name in imported_modules(path) if name.startswith("llmlab.")}


def upward_imports(package: Path = PACKAGE) -> list[str]:
    problems = []
    for path in sorted(package.rglob("*.py")):
        module = top_module(path, package)
        for imported in llmlab_imports(path):
            if LAYER.get(imported, 0) > LAYER[module]:
                problems.append(f"{path.relative_to(package.parent)} imports llmlab.{imported}")
    return problems


def forbidden_imports(package: Path = PACKAGE) -> list[str]:
    problems = []
    for path in sorted(package.rglob("*.py")):
        imported = imported_modules(path)
        for ban in FORBIDDEN.get(top_module(path, package), ()):
            if any(name == ban or name.startswith(ban + ".") for name in imported):
                problems.append(f"{path.relative_to(package.parent)} imports {ban}")
    return problems


def test_every_module_has_a_layer():
    modules = {top_module(path) for path in PACKAGE.rglob("*.py")}
    assert modules <= set(LAYER), f"give these a layer in LAYER: {sorted(modules - set(LAYER))}"


# Every package imports the ground floor, so a learner reads it first: one concept per module, and
# a module this long has become a grab-bag of several (env.py once held probing, diagnosis,
# presentation and the units at 832 lines).
GROUND_FLOOR_MAX_LINES = 500


def long_ground_floor_modules(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if LAYER[top_module(path, package)] == 0 and lines > GROUND_FLOOR_MAX_LINES:
            found.append(f"{path.relative_to(package.parent)} ({lines} lines)")
    return found


def test_no_ground_floor_module_grows_into_a_grab_bag():
    too_long = long_ground_floor_modules()
    assert too_long == [], f"split these by concept, {GROUND_FLOOR_MAX_LINES} lines at most"

def test_no_module_imports_one_above_it():
    assert upward_imports() == []


def test_the_planner_never_imports_torch_distributed_and_only_cli_and_course_import_jobs():
    assert forbidden_imports() == []


def test_the_trainer_and_its_checkpointer_load_no_job_tooling():
    """Read in a fresh interpreter: what importing the trainer loads, through every face it
    imports on the way (llmlab.distributed's above all), holds none of the job tooling."""
    code = ("import sys, llmlab.train, llmlab.train.checkpointer\n"
            "print([f'{name}.{tool}' for name, module in list(sys.modules.items())\n"
            "       if name.startswith('llmlab') for tool in sys.argv[1:]\n"
            "       if hasattr(module, tool)])\n"
            "print('llmlab.jobs' in sys.modules)")
    found = subprocess.run([sys.executable, "-c", code, *JOB_TOOLING], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    assert found == ["[]", "False"]


def test_the_recipes_sit_between_the_libraries_and_the_course_and_the_cli_trains_with_them():
    libraries = ("train", "prune", "quant", "posttrain", "evaluate", "inference")
    assert max(LAYER[m] for m in libraries) < LAYER["recipes"] < LAYER["course"] == LAYER["cli"]
    cli = imported_modules(PACKAGE / "cli.py")  # `llmlab train` never goes through the course
    assert "llmlab.recipes" in cli and not any(name.startswith("llmlab.course.pre") for name in cli)


def test_models_import_nothing_from_data():
    imported = set().union(*(llmlab_imports(path) for path in (PACKAGE / "models").rglob("*.py")))
    assert "data" not in imported


def test_models_importing_data_is_caught(tmp_path):
    path = tmp_path / "llmlab" / "models" / "presets.py"
    path.parent.mkdir(parents=True)
    path.write_text("from llmlab.data.pipeline import PROFILE_SPECS\n")
    expected = "llmlab/models/presets.py imports llmlab.data"
    assert forbidden_imports(tmp_path / "llmlab") == [expected]


def test_the_metrics_sit_just_above_the_models_and_below_the_trainer():
    # The trainer and the harnesses call evaluate's loss and perplexity: it must be below them.
    assert LAYER["models"] < LAYER["evaluate"] < min(LAYER[m] for m in ("memory", "train"))
    imported = set().union(*(llmlab_imports(path) for path in (PACKAGE / "evaluate").rglob("*.py")))
    assert not imported & {"train", "prune", "quant"}, "an experiment that trains is not a metric"


@pytest.mark.parametrize("source", ["import torch.distributed as dist",
                                    "from torch import distributed",
                                    "from torch.distributed.tensor import DTensor"])
def test_a_forbidden_import_is_caught(tmp_path, source):
    path = tmp_path / "llmlab" / "scale" / "simulate.py"
    path.parent.mkdir(parents=True)
    path.write_text(f"def f():\n    {source}\n")
    expected = "llmlab/scale/simulate.py imports torch.distributed"
    assert forbidden_imports(tmp_path / "llmlab") == [expected]


@pytest.mark.parametrize("source", ["from llmlab.train import Trainer", "from llmlab import train",
                                    "import llmlab.train.loop"])
def test_jobs_importing_the_trainer_is_caught(tmp_path, source):
    path = tmp_path / "llmlab" / "jobs" / "slurm.py"
    path.parent.mkdir(parents=True)
    path.write_text(source + "\n")
    assert forbidden_imports(tmp_path / "llmlab") == ["llmlab/jobs/slurm.py imports llmlab.train"]


@pytest.mark.parametrize("module", ["train", "evaluate", "inference", "plots"])
def test_job_tooling_imported_outside_the_cli_and_the_course_is_caught(tmp_path, module):
    path = tmp_path / "llmlab" / module / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text("from llmlab.jobs.slurm import sbatch_script\n")
    assert forbidden_imports(tmp_path / "llmlab") == [f"llmlab/{module}/x.py imports llmlab.jobs"]


def test_the_cli_and_the_course_may_import_job_tooling(tmp_path):
    for module in ("cli", "course"):
        path = tmp_path / "llmlab" / module / "x.py"
        path.parent.mkdir(parents=True)
        path.write_text("import llmlab.jobs.slurm\n")
    assert forbidden_imports(tmp_path / "llmlab") == []


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
