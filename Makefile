# The README's commands. Each first runs tools/install.py, which creates the environment (.venv)
# on first use and reuses it after; it updates it when constraints.txt or pyproject.toml change,
# and rebuilds it when another Python made it or an earlier install did not finish.
# PYTHON needs to be 3.11 or newer: make PYTHON=python3.12 lab
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROFILE ?= auto
# Extra JupyterLab flags, e.g. on a GPU VM: make lab LAB_ARGS="--no-browser --port 8888"
LAB_ARGS ?=
# JupyterLab refuses to run as root (common in containers and cloud images) without this flag.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# Two pytest workers: the CI machine has 2 cores and the notebook tests dominate. Tests run in
# the order tests/conftest.py sets (Lab 03's notebook first, then the labs that reuse its model,
# the unit tests last). Each worker gets one math thread: two processes with two spinning OpenMP
# threads each on two cores run a training step many times slower than one thread each. Labs 08
# and 10 pin their own count (two: the stored tables on every machine); LLMLAB_CPU_THREADS
# replaces it here: side by side they took 395 s and 448 s at one thread each, 444 s and 480 s at
# two (nbval-lax compares no number a thread count moves). Threads that wait sleep instead of
# spinning (OMP_WAIT_POLICY=PASSIVE): two notebooks side by side at two spinning threads each
# stalled the run (benchmarks and stored runs keep the default).
PYTEST_WORKERS ?= 2
TEST_THREADS ?= 1
# The 25 slowest tests close the report: where the CI budget goes (notebooks, mostly).
DURATIONS ?= 25
# A notebook cell's limit, in seconds: without one, nbval waits forever on a kernel that died
# (tried: a cell that aborts its kernel hung the run; with a limit that cell failed and the run
# went on). Twice the longest cell under the test command (Lab 03's training, 534 s capped at AVX2).
NBVAL_CELL_TIMEOUT ?= 1200

.PHONY: lab course test labs solutions doctor gpu-check bench lint clean FORCE

# Always run: which Python made .venv, and whether the pins changed, are checks make cannot do.
$(STAMP): FORCE
	@$(PYTHON) tools/install.py $(VENV)

lab: $(STAMP)  ## open JupyterLab on the learner's notebooks
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) $(LAB_ARGS) labs/

course: $(STAMP)  ## run every solution notebook headless and print a table (PROFILE=smoke|full|auto)
	$(PY) -m llmlab course --profile $(PROFILE)

# Each run works in a scratch folder of its own, removed after: the temporary files of the tests
# and of the libraries they drive (torchrun's, GPTQModel's, Inductor's compile cache: a cache
# filled under other CPU flags once crashed a kernel) and what the labs build for each other
# (LLMLAB_ARTIFACTS: Lab 03's notebook, at one thread here, would otherwise replace the
# checkout's model, the one `make solutions` made the stored runs of Labs 06-10 with).
test: $(STAMP)  ## every test: unit, notebooks (nbval), labs/solutions sync
	scratch=$$(mktemp -d -t llmlab-test-XXXX) && trap 'rm -rf "$$scratch"' EXIT && \
	TMPDIR=$$scratch LLMLAB_ARTIFACTS=$$scratch/artifacts OMP_NUM_THREADS=$(TEST_THREADS) LLMLAB_CPU_THREADS=$(TEST_THREADS) OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder tests solutions --nbval-lax --nbval-current-env --nbval-cell-timeout=$(NBVAL_CELL_TIMEOUT) -p no:cacheprovider --durations=$(DURATIONS)

labs: $(STAMP)  ## regenerate labs/ from solutions/
	$(PY) -m llmlab make-labs

doctor: $(STAMP)
	$(PY) -m llmlab doctor

gpu-check: $(STAMP)  ## measure the course's GPU figures (under 3 minutes on an H200; no GPU: dry run)
	$(PY) -m llmlab gpu-check

bench: $(STAMP)  ## speed and memory benchmarks (tables, not tests)
	for script in benchmarks/*.py; do $(PY) $$script || exit 1; done

lint: $(STAMP)
	$(VENV)/bin/ruff check llmlab tests benchmarks tools

clean:
	rm -rf $(VENV) build

solutions: $(STAMP)  ## re-run solutions/ in place at the smoke scale to store their outputs, then labs
	$(PY) -m llmlab course --profile smoke --threads 2 --out solutions
	$(PY) -m llmlab make-labs
