"""Lab 03's pretraining recipe: the model preset, the training settings per profile, the full
profile's length, which comes from its data, and the consumer profile's micro-batch, which comes
from the GPU's memory. `llmlab train` and the labs both train with it."""

from llmlab import env
from llmlab.data import DatasetPaths, prepare_default_dataset
from llmlab.data.pipeline import FULL_ONLINE_CORPUS, profile_spec
from llmlab.device import training_dtype_for
from llmlab.memory import TrainingSetup, estimate_memory
from llmlab.models import ModelShape, preset, training_flops_per_token
from llmlab.recipes.artifacts import artifacts_dir
from llmlab.recipes.budget import TrainingBudget, training_budget
from llmlab.train import TrainConfig
from llmlab.units import GB

MODEL_PRESET = {"smoke": "tiny", "full": "gpt2-124m", "consumer": "gpt2-124m"}
# Training tokens of the full profile's offline dataset (the whole built-in corpus, 32768-token
# BPE), as prepare_default_dataset(..., "full") reports them on Python 3.11 (the built-in corpus
# is its standard library). Recorded, so the offline recipe is known without building it.
FULL_TRAIN_TOKENS = 2_708_799
# Passes over the training split at full: two over the small built-in corpus (more would only
# overfit), one over the FineWeb-Edu sample (text enough that each token is seen once).
FULL_PASSES = {"builtin": 2, "fineweb-edu": 1}


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
# GPT-2 small on a 12-20 GB GPU: the full recipe, its 16 sequences per optimizer step split into
# micro-batches that fit (micro_batch_for), so the tokens per step and the steps are full's.
RECIPES["consumer"] = RECIPES["full"]
# The share of the GPU's memory the planned step (CUDA context included) may take: the allocator's
# fragmentation and torch.compile's autotuning need the rest.
CONSUMER_MEMORY_FRACTION = 0.85


def micro_batch_for(memory_bytes: float, dtype: str = "bf16") -> int:
    """The consumer profile's micro-batch on a GPU of `memory_bytes`: the largest power of two
    dividing the full recipe's 16 sequences per step whose step, in `dtype` with accumulation
    over the rest, Lab 02's planner fits in CONSUMER_MEMORY_FRACTION of the memory."""
    recipe = RECIPES["full"]
    sequences = recipe["micro_batch_size"]
    shape = preset(MODEL_PRESET["full"], vocab_size=profile_spec("full").vocab_size)
    micro = sequences  # 16: halving it keeps it a divisor
    while micro >= 1:
        # As the trainer runs: torch.autocast (fp32 weights and gradients) and fused AdamW.
        setup = TrainingSetup(batch=micro, seq=recipe["seq_len"], dtype=dtype, fp32_grads=True,
                              fused_optimizer=True, grad_accumulation=sequences // micro)
        if estimate_memory(shape, setup).total <= CONSUMER_MEMORY_FRACTION * memory_bytes:
            return micro
        micro //= 2
    raise ValueError(f"GPT-2 small does not fit a {memory_bytes / GB:.1f} GB GPU even one "
                     "sequence at a time: use the smoke profile")


def _training_gpu() -> tuple[int, str]:
    """cuda:0's memory, and the dtype the trainer's `auto` picks there."""
    gpus = env.visible_gpus()
    if not gpus:
        raise ValueError("the consumer profile sizes its micro-batch to a GPU's memory, and torch "
                         "sees no CUDA GPU: use the smoke profile (or full, to train it here)")
    return gpus[0].total_memory_bytes, training_dtype_for("cuda", gpus[0].capability).name


def lab03_config(profile_name: str, **changes) -> TrainConfig:
    """Lab 03's training settings for a profile (smoke: a few minutes on 2 CPU cores; consumer:
    full's, in micro-batches that fit cuda:0).

    Asking for another max_steps scales the warm-up with it (unless warmup_steps is given too):
    a shorter run is the recipe in miniature, where a fixed warm-up could outlast the run.
    """
    if profile_name not in RECIPES:
        raise ValueError(f"unknown profile {profile_name!r}: use one of {', '.join(RECIPES)}")
    recipe = RECIPES[profile_name]
    if profile_name in ("full", "consumer"):
        recipe = {**recipe, "max_steps": full_budget().steps}
    if profile_name == "consumer":
        micro = micro_batch_for(*_training_gpu())
        recipe = {**recipe, "micro_batch_size": micro,
                  "grad_accum_steps": recipe["micro_batch_size"] // micro}
    if "max_steps" in changes and "warmup_steps" not in changes:
        fraction = recipe["warmup_steps"] / recipe["max_steps"]
        changes["warmup_steps"] = round(fraction * changes["max_steps"])
    return TrainConfig(**{**recipe, **changes})


def lab03_shape(profile_name: str, dataset: DatasetPaths) -> ModelShape:
    return preset(MODEL_PRESET[profile_name], vocab_size=dataset.vocab_size)


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
