#!/usr/bin/env bash
# The unit tests and Labs 00-05 under the oldest torch the course supports (pyproject.toml's
# `torch>=` bound), in an environment of its own (.venv-oldest), installed as a Colab runtime
# installs the course: torch first, then everything else with tools/install_here.py's constraints,
# which keep that torch. Not part of `make test`: PyPI's Linux torch is the CUDA build (about 3 GB
# to download), too much for every CI run; run it when the pins or a version-dependent path change.
#   bash tools/test_oldest_torch.sh            (PYTHON=python3.12 to choose the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv-oldest
OLDEST=$("$PYTHON" -c 'import sys; sys.path.insert(0, "tools"); from install_here import oldest_torch; print(oldest_torch())')
if [ ! -x "$VENV/bin/python" ]; then "$PYTHON" -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install --quiet "torch==$OLDEST.*"
"$VENV/bin/python" - <<'PY'
import importlib.metadata, sys
sys.path.insert(0, "tools")
from install_here import constraints_keeping
open(".venv-oldest/constraints.txt", "w").write(constraints_keeping(importlib.metadata.version("torch")))
PY
"$VENV/bin/python" -m pip install --quiet -c "$VENV/constraints.txt" -e ".[course,extras,dev]"
"$VENV/bin/python" -c 'import torch; print(f"torch {torch.__version__}")'
# Lab 03's notebook saves its model where the labs look for it: a folder of this run's own, so the
# checkout's model (the one the stored runs of Labs 06-10 were made with) stays as it was.
LLMLAB_ARTIFACTS=$(mktemp -d -t llmlab-oldest-XXXX)
export LLMLAB_ARTIFACTS
trap 'rm -rf "$LLMLAB_ARTIFACTS"' EXIT
# test_pins checks that the installed versions are the pinned ones: not here, by design.
OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE "$VENV/bin/python" -m pytest -n 2 --dist loadscope \
    --no-loadscope-reorder -p no:cacheprovider tests solutions/00_environment.ipynb \
    solutions/01_data.ipynb solutions/02_memory.ipynb solutions/03_training.ipynb \
    solutions/04_multi_gpu.ipynb solutions/05_at_scale.ipynb \
    --nbval-lax --nbval-current-env --nbval-cell-timeout=1200 --ignore tests/test_pins.py "$@"
