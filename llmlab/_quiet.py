"""Silence third-party log noise once, so notebook outputs stay stable between runs.

Only messages that carry no information for a learner are hidden; real errors still show.
Every setting uses `setdefault`, so a user who sets the variable keeps their own value.
"""

import logging
import os
import warnings


def silence_third_party_noise() -> None:
    # Hugging Face libraries log advisory warnings at import and on every model build.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DATASETS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # The Rust tokenizers warn after every fork (data-loader workers, datasets.map processes).
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # torchao (pulled in by GPTQ tooling) logs timestamped warnings at import.
    logging.getLogger("torchao").setLevel(logging.ERROR)
    # On AVX512-BF16 CPUs bitsandbytes looks for a hub-downloaded kernel (the `kernels` package,
    # which the course does not install: no downloads) and says so before using its own.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    # Jupyter's TqdmWarning when ipywidgets is missing is handled by tqdm's text fallback.
    warnings.filterwarnings("ignore", message="IProgress not found")
