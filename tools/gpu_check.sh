#!/usr/bin/env bash
# The GPU check on a GPU machine, in one go: 141 s of measuring on one H200 (the sections' budgets
# add up to 610 s; the overall budget, 480 s by default, stops the later ones when it is spent).
# It uses the machine's own Python and PyTorch (no .venv, no network): run it from anywhere as
#   bash tools/gpu_check.sh [REPORT.json]   (default build/gpu_check.json; BUDGET_S=480, PYTHON=python3)
# Give the command a timeout of about 10 minutes: the hard stop below is 570 s.
set -euo pipefail
cd "$(dirname "$0")/.."
report="${1:-build/gpu_check.json}"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout 570 "${PYTHON:-python3}" -m llmlab gpu-check \
    --out "$report" --budget-s "${BUDGET_S:-480}"
