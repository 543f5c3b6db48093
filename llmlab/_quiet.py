"""Silence third-party log noise once, so notebook outputs stay stable between runs.

Only messages that carry no information for a learner are hidden; real errors still show.
Every setting uses `setdefault`, so a user who sets the variable keeps their own value.
"""

import logging
import os
import warnings


class _DropMessagesStartingWith(logging.Filter):
    def __init__(self, *prefixes: str):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


# DeepSpeed sets its logger's level when it is imported, so a filter (which it keeps) is what
# hides a message; one instance, so calling the function again does not stack copies.
_DEEPSPEED_NOISE = _DropMessagesStartingWith(
    # At import, on every machine without a GPU (`llmlab doctor` reports the devices).
    "Setting accelerator to CPU",
    # llmlab's DeepSpeed configs choose torch's SGD on purpose (see distributed.deepspeed_config).
    "**** You are using ZeRO with an untested optimizer",
)

_ONNX_QUANTIZE_ADVICE = _DropMessagesStartingWith("Please consider to run pre-processing")


def silence_third_party_noise() -> None:
    # Hugging Face libraries log advisory warnings at import and on every model build.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DATASETS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # torch.profiler's backend (kineto) prints a timestamped line to stderr at every profile's
    # start and stop, at its highest log level: only level 6 hides them, its errors with them
    # (llmlab.profiler.profile_step says when a GPU profile comes back without kernels).
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    # The Rust tokenizers warn after every fork (data-loader workers, datasets.map processes).
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # torchao (GPTQModel's dependency, which transformers imports when it is installed) logs
    # timestamped warnings at import, its own and torch's about the enums it registers.
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # On AVX512-BF16 CPUs bitsandbytes looks for a hub-downloaded kernel (the `kernels` package,
    # which the course does not install: no downloads) and says so before using its own.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    logging.getLogger("DeepSpeed").addFilter(_DEEPSPEED_NOISE)
    # DeepSpeed calls torch's collectives by their old names, and torch warns at every call.
    old_names = r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)`"
    warnings.filterwarnings("ignore", old_names + " is deprecated")
    # Counting tensor-parallel collectives with CommDebugMode hooks modules whose outputs are
    # transformers' dataclasses; torch warns, once per module type, that those hooks are skipped.
    warnings.filterwarnings("ignore", message="For backward hooks to be called")
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    # peft asks transformers 5 for a model's `is_gradient_checkpointing`, an old name, on every
    # get_peft_model (QLoRA in Lab 07).
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated")
    # torch.onnx's exporter names, at every export, each torchvision operator it skips (the
    # course needs none), and torch.export warns about an old tree-spec type transformers uses.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # ONNX Runtime's quantize_dynamic advises a pre-processing step on the root logger at every
    # call, whatever the model.
    logging.getLogger().addFilter(_ONNX_QUANTIZE_ADVICE)
    # Jupyter's TqdmWarning when ipywidgets is missing is handled by tqdm's text fallback.
    warnings.filterwarnings("ignore", message="IProgress not found")
