"""Lab 03's recipe and its trained model, for the labs that start from a trained model.

`trained_model(profile)` loads the model Lab 03 saved in the artifacts folder; when it is not
there (a lab run on its own, a fresh checkout), or was trained with another recipe, it trains one
now with today's recipe, so every lab also runs alone.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from llmlab.bench import markdown_table, peak_tflops
from llmlab.course.artifacts import artifacts_dir
from llmlab.data import DatasetPaths, prepare_default_dataset
from llmlab.data.docstrings import DocstringPair, hub_docstring_pairs
from llmlab.data.errors import DataError
from llmlab.data.loaders import RandomWindows
from llmlab.data.pipeline import FULL_ONLINE_CORPUS, profile_spec
from llmlab.evaluate.bits_per_byte import published_bits_per_byte
from llmlab.files import (
    DamagedFile,
    atomic_folder,
    exclusive_lock,
    verify_folder,
    write_folder_checksums,
)
from llmlab.models import ModelShape, build_model, preset, training_flops_per_token
from llmlab.network import ONLINE_VARIABLE, online
from llmlab.train import TrainConfig, Trainer, TrainResult

MODEL_PRESET = {"smoke": "tiny", "full": "gpt2-124m"}
HUB_MODEL = "gpt2"  # OpenAI's GPT-2 small: what online users fine-tune instead of Lab 03's model
# Training tokens of the full profile's offline dataset (the whole built-in corpus, 32768-token
# BPE), as prepare_default_dataset(..., "full") reports them on Python 3.11 (the built-in corpus
# is its standard library). Recorded, so the offline recipe is known without building it.
FULL_TRAIN_TOKENS = 2_708_799
# Passes over the training split at full: two over the small built-in corpus (more would only
# overfit), one over the FineWeb-Edu sample (text enough that each token is seen once).
FULL_PASSES = {"builtin": 2, "fineweb-edu": 1}
# The rate the budget uses, measured: `llmlab train --profile full` (bf16, torch.compile) ran at
# 359,000 tokens/s on one H200 on 2026-11-28, 28% of its 989 TFLOP/s bf16 peak (gpu-check's
# training section gave 26-29%). An H100 has the same peak; `llmlab gpu-check` measures yours.
RATE_GPU, RATE_MFU = "H200", 0.28


RECIPES = {
    # About 4 minutes on 2 CPU cores: 1.4M tokens, about 3 passes over the smoke subset's 440k
    # training tokens, enough for held-out text to compress better than xz does (bits per byte).
    # A micro-batch of 16 runs faster per token than 8 on a CPU once the output layer is small.
    "smoke": dict(
        max_steps=700,
        micro_batch_size=16,
        seq_len=128,
        lr=2e-3,
        warmup_steps=30,
        eval_interval=100,
        eval_batches=8,
        log_interval=10,
        checkpoint_interval=200,
    ),
    # GPT-2 small on one GPU, 16 sequences of 1024 tokens per step; max_steps comes from the
    # dataset (full_budget): 330 steps offline, 2 passes over the built-in corpus.
    "full": dict(
        micro_batch_size=16,
        seq_len=1024,
        lr=6e-4,
        warmup_steps=30,
        eval_interval=50,
        eval_batches=20,
        log_interval=10,
        checkpoint_interval=100,
        compile=True,
    ),
}


def lab03_config(profile_name: str, **changes) -> TrainConfig:
    """Lab 03's training settings for a profile (smoke: a few minutes on 2 CPU cores).

    Asking for another max_steps scales the warm-up with it (unless warmup_steps is given too):
    a shorter run is the recipe in miniature, where a fixed warm-up could outlast the run.
    """
    if profile_name not in RECIPES:
        raise ValueError(f"unknown profile {profile_name!r}: use 'smoke' or 'full'")
    recipe = RECIPES[profile_name]
    if profile_name == "full":
        recipe = {**recipe, "max_steps": full_budget().steps}
    if "max_steps" in changes and "warmup_steps" not in changes:
        fraction = recipe["warmup_steps"] / recipe["max_steps"]
        changes["warmup_steps"] = round(fraction * changes["max_steps"])
    return TrainConfig(**{**recipe, **changes})


def lab03_shape(profile_name: str, dataset: DatasetPaths) -> ModelShape:
    return preset(MODEL_PRESET[profile_name], vocab_size=dataset.vocab_size)


@dataclass(frozen=True)
class TrainingBudget:
    """How long a run is: steps and tokens (exact), minutes (an estimate at a rate measured on
    one GPU)."""

    steps: int
    tokens: int
    tokens_per_s: float  # RATE_GPU's measured MFU, for this model's FLOPs per token

    @property
    def minutes(self) -> float:
        return self.tokens / self.tokens_per_s / 60

    def __str__(self) -> str:
        return (f"{self.steps:,} steps, {self.tokens / 1e6:,.1f}M tokens: about "
                f"{self.minutes:,.1f} minutes on one {RATE_GPU} at "
                f"~{self.tokens_per_s:,.0f} tokens/s ({RATE_MFU:.0%} MFU, as measured there); "
                "llmlab gpu-check measures your GPU's rate")  # fmt: skip


def training_budget(
    train_tokens: int, passes: float, tokens_per_step: int, flops_per_token: float
) -> TrainingBudget:
    """Steps for `passes` over `train_tokens`, and the minutes they would take at RATE_MFU of
    RATE_GPU's bf16 peak: tokens/s = MFU x peak FLOP/s / training FLOPs per token."""
    steps = int(passes * train_tokens) // tokens_per_step
    tokens_per_s = RATE_MFU * peak_tflops(RATE_GPU, "bf16") * 1e12 / flops_per_token
    return TrainingBudget(steps, steps * tokens_per_step, tokens_per_s)


def full_budget() -> TrainingBudget:
    """The full recipe's length: offline, 2 passes over the built-in corpus (FULL_TRAIN_TOKENS);
    online, 1 pass over the FineWeb-Edu sample, whose tokens its dataset.json records (it is
    built now if missing)."""
    spec, recipe = profile_spec("full"), RECIPES["full"]
    train_tokens = FULL_TRAIN_TOKENS
    if spec.corpus == FULL_ONLINE_CORPUS:  # the sample's tokens are known once it is built
        train_tokens = prepare_default_dataset(artifacts_dir(), "full").info["tokens"]["train"]
    shape = preset(MODEL_PRESET["full"], vocab_size=spec.vocab_size)
    flops = training_flops_per_token(shape, recipe["seq_len"]).total
    tokens_per_step = recipe["micro_batch_size"] * recipe["seq_len"]
    return training_budget(train_tokens, FULL_PASSES[spec.corpus], tokens_per_step, flops)


@dataclass
class Lab03Data:
    dataset: DatasetPaths
    train: RandomWindows
    val: RandomWindows


def lab03_data(profile_name: str, config: TrainConfig, seed: int = 0) -> Lab03Data:
    """Lab 01's tokenizer and shards (built now if missing) as random-window batch sources."""
    dataset = prepare_default_dataset(artifacts_dir(), profile_name)

    def windows(paths, offset: int) -> RandomWindows:
        return RandomWindows(
            paths,
            config.seq_len,
            config.micro_batch_size,
            tokenizer=dataset.fingerprint,
            seed=seed + offset,
        )

    return Lab03Data(dataset, windows(dataset.train, 0), windows(dataset.val, 1))


def model_folder(profile_name: str) -> Path:
    return artifacts_dir() / f"lab03-{profile_name}-model"


RECIPE_FILE = "lab03-recipe.json"


def recipe_stamp(profile_name: str) -> dict:
    """What a saved model was trained with: the recipe, the model preset and the dataset."""
    recipe = lab03_config(profile_name).to_dict()
    recipe.pop("progress")  # a progress bar changes nothing in the model
    spec = profile_spec(profile_name)
    return {"recipe": recipe, "model": MODEL_PRESET[profile_name], "corpus": spec.corpus,
            "vocab_size": spec.vocab_size}  # fmt: skip


def save_trained_model(model, tokenizer: PreTrainedTokenizerFast, profile_name: str) -> Path:
    """Save in Hugging Face format, with the recipe and a checksum of every file, under a
    temporary name, then rename: never half a model, and a damaged file is found on loading."""
    final = model_folder(profile_name)
    with atomic_folder(final) as temporary:
        model.save_pretrained(temporary)
        tokenizer.save_pretrained(temporary)
        (temporary / RECIPE_FILE).write_text(json.dumps(recipe_stamp(profile_name), indent=1))
        write_folder_checksums(temporary)
    return final


def train_lab03_model(profile_name: str, progress: bool = True) -> tuple[object, TrainResult]:
    """Train Lab 03's model with its recipe and save it to the artifacts folder."""
    config = lab03_config(profile_name, progress=progress)
    data = lab03_data(profile_name, config)
    tokenizer = data.dataset.load_tokenizer()
    shape = lab03_shape(profile_name, data.dataset)
    flops = training_flops_per_token(shape, config.seq_len).total
    model = build_model(shape)
    trainer = Trainer(model, config, data.train, data.val, tokenizer=tokenizer,
                      flops_per_token=flops, measure_peak=True)  # fmt: skip
    result = trainer.fit()
    save_trained_model(model, tokenizer, profile_name)
    return model, result


def why_train_again(profile_name: str) -> str | None:
    """Why the saved model cannot be used as it is (None when it can)."""
    folder = model_folder(profile_name)
    if not (folder / "config.json").is_file():
        return f"No Lab 03 model in {folder}"
    try:
        recorded = json.loads((folder / RECIPE_FILE).read_text())
    except (OSError, ValueError):  # saved before recipes were recorded, or unreadable
        recorded = None
    if recorded != recipe_stamp(profile_name):
        return f"The Lab 03 model in {folder} was trained with another recipe"
    try:
        verify_folder(folder, f"The Lab 03 model in {folder}", remedy="")
    except DamagedFile as error:
        return f"{error.artifact} is damaged: {error.file} {error.problem}"
    return None


def trained_model(profile_name: str = "smoke", progress: bool = True):
    """(model, tokenizer) trained by Lab 03 for this profile: loaded, or trained now if missing
    or made with another recipe. A lock makes a second lab that needs it meanwhile wait for this
    training and reuse it, rather than train its own copy."""
    with exclusive_lock(artifacts_dir() / f".lab03-{profile_name}-model.lock"):
        if problem := why_train_again(profile_name):
            print(f"{problem}: training it now (the {profile_name} recipe).")
            train_lab03_model(profile_name, progress=progress)
        # Loaded under the lock too: from_pretrained swaps PreTrainedModel.tie_weights for a no-op
        # while it loads, so two loads at once in one process can leave the no-op in place, and
        # every model built afterwards has an LM head untied from its embedding.
        folder = model_folder(profile_name)
        # safetensors only (a pickled .bin would be unpickled, which can run code); no remote code
        model = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True)
        return model, PreTrainedTokenizerFast.from_pretrained(folder)


def hub_model(name: str = HUB_MODEL):
    """(model, tokenizer) of a pretrained model from the Hugging Face Hub, only with
    LLMLAB_ONLINE=1: GPT-2 small by default, pretrained on web text rather than on the standard
    library (pair it with llmlab.data.docstrings.hub_docstring_pairs). safetensors weights, no
    remote code."""
    model = AutoModelForCausalLM.from_pretrained(_online_only(name), use_safetensors=True)
    return model, hub_tokenizer(name)


def hub_tokenizer(name: str = HUB_MODEL):
    """The tokenizer of a Hub model (GPT-2's by default), only with LLMLAB_ONLINE=1."""
    return AutoTokenizer.from_pretrained(_online_only(name))


def _online_only(name: str) -> str:
    if not online():
        raise DataError(
            f"{name} comes from the Hugging Face Hub and the course is offline: set "
            f"{ONLINE_VARIABLE}=1 before starting Python to use it, or use trained_model() "
            "(Lab 03's model, on every machine)."
        )
    return name


def published_references(dataset: DatasetPaths, held_out_text: str) -> str:
    """Published held-out losses of GPT-2 small, in bits per byte of `held_out_text` (converted
    with the GPT-2 tokenizer's tokens per byte of it), as a table; they were measured on
    FineWeb(-Edu), so for any other dataset a line saying how to get comparable text instead."""
    if dataset.info["spec"]["corpus"] != FULL_ONLINE_CORPUS:
        return ("Published GPT-2 small losses are measured on FineWeb(-Edu), not on this text: "
                f"set {ONLINE_VARIABLE}=1 to train the full profile on FineWeb-Edu and compare.")
    rows = published_bits_per_byte(held_out_text, hub_tokenizer())
    title = "Published GPT-2 small losses, in bits per byte of this text:"
    return title + "\n" + markdown_table(rows, aligned=True)


@dataclass(frozen=True)
class HubTask:
    """Lab 08's online pair: a model pretrained elsewhere and a code-summarization task from
    GitHub, neither of which has seen the other."""

    model: object  # a transformers causal language model
    tokenizer: object
    train: list[DocstringPair]
    test: list[DocstringPair]


def hub_task(max_train: int, max_test: int) -> HubTask | None:
    """With LLMLAB_ONLINE=1, GPT-2 small (`hub_model`) and CodeXGLUE's Python functions
    (`hub_docstring_pairs`, the first `max_train` and `max_test`); offline, None, and nothing is
    read from the network."""
    if not online():
        return None
    model, tokenizer = hub_model()
    return HubTask(model, tokenizer, hub_docstring_pairs("train", max_train),
                   hub_docstring_pairs("test", max_test))  # fmt: skip
