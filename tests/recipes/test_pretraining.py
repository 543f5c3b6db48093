"""Lab 03's recipes: valid settings for every profile, the full one's length comes from its data
(about 2 passes over the built-in corpus offline, 1 over the FineWeb-Edu sample online), the
consumer one is the full one in micro-batches that Lab 02's planner fits to the GPU, all
checkpoint mid-run, and a shortened run scales its warm-up instead of never leaving it."""

import dataclasses
from types import SimpleNamespace

import pytest
from helpers.fake_machines import L4, T4

from llmlab import env
from llmlab.recipes import pretraining
from llmlab.recipes.pretraining import FULL_TRAIN_TOKENS, lab03_config, micro_batch_for
from llmlab.train import TrainConfig, learning_rate
from llmlab.units import GB


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)


def test_the_recipes_are_valid_configs():
    for profile_name in ("smoke", "full"):
        assert isinstance(lab03_config(profile_name), TrainConfig)
    with pytest.raises(ValueError, match="unknown profile"):
        lab03_config("huge")


def test_the_full_recipe_makes_about_two_passes_over_the_offline_corpus():
    c = lab03_config("full")
    tokens = c.max_steps * c.micro_batch_size * c.grad_accum_steps * c.seq_len
    assert 1.5 <= tokens / FULL_TRAIN_TOKENS <= 2.0  # not ~40 passes: that only overfits
    assert c.max_steps == 330  # the README's offline figure


def test_online_the_full_recipe_makes_one_pass_over_the_sample_it_built(monkeypatch):
    """Online, max_steps comes from the training tokens the built sample's dataset.json records,
    at one pass. Fails if it kept the offline figure (330) or made two passes (6,103)."""
    built = SimpleNamespace(info={"tokens": {"train": 50_000_000}})
    asked = []

    def prepare(folder, profile_name):
        asked.append(profile_name)
        return built

    monkeypatch.setattr(pretraining, "prepare_default_dataset", prepare)
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    assert lab03_config("full").max_steps == 50_000_000 // (16 * 1024) == 3051
    assert asked == ["full"]


@pytest.mark.parametrize("profile_name", ["smoke", "full"])
def test_both_recipes_checkpoint_during_the_run(profile_name):
    c = lab03_config(profile_name)
    assert 0 < c.checkpoint_interval < c.max_steps


@pytest.mark.parametrize("steps", [5, 50, 3000])
def test_a_shorter_or_longer_run_scales_the_warm_up_with_it(steps):
    recipe = lab03_config("smoke")
    c = lab03_config("smoke", max_steps=steps)
    assert c.warmup_steps == round(steps * recipe.warmup_steps / recipe.max_steps)
    assert learning_rate(steps - 1, c) < c.lr  # the run leaves warm-up and decays


def test_an_explicit_warm_up_is_kept():
    assert lab03_config("smoke", max_steps=50, warmup_steps=7).warmup_steps == 7


def consumer_config(monkeypatch, gpu) -> TrainConfig:
    """The consumer recipe as lab03_config makes it with `gpu` as cuda:0."""
    monkeypatch.setattr(env, "visible_gpus", lambda: [gpu])
    return lab03_config("consumer")


@pytest.mark.parametrize(
    ("gpu", "micro_batch"),
    [(dataclasses.replace(L4, total_memory_bytes=12 * GB), 8), (T4, 8),
     (dataclasses.replace(L4, total_memory_bytes=24 * GB), 16)],
    ids=["12GB", "T4-16GB", "24GB"],
)
def test_the_consumer_recipe_is_the_full_one_in_micro_batches_that_fit(monkeypatch, gpu,
                                                                       micro_batch):
    """16 sequences per optimizer step at every size, so the same steps as full; the split is
    the planner's. Fails if the split ignores the GPU (16 x 1 everywhere) or the accumulation
    does not make up the rest (fewer tokens per step)."""
    full, consumer = lab03_config("full"), consumer_config(monkeypatch, gpu)
    assert consumer.micro_batch_size == micro_batch
    assert consumer.micro_batch_size * consumer.grad_accum_steps == full.micro_batch_size == 16
    changed = {name for name, value in vars(consumer).items() if vars(full)[name] != value}
    assert changed <= {"micro_batch_size", "grad_accum_steps"}
    assert consumer.dtype == "auto"  # bf16 where the GPU has it, fp16 with a scaler on a T4


def test_the_micro_batch_shrinks_with_the_memory():
    sizes = [micro_batch_for(gb * GB) for gb in (80, 24, 16, 12, 8, 6, 4)]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 16 and sizes[-1] == 1
    assert micro_batch_for(16 * GB) < 16  # the full micro-batch plans 14.6 GB: too tight


def test_the_planner_is_asked_in_the_dtype_the_trainer_will_use(monkeypatch):
    """A GPU before Volta trains in fp32 (no fp16 tensor cores): twice the activations, so half
    the micro-batch of a bf16 GPU of the same memory."""
    bf16 = dataclasses.replace(L4, total_memory_bytes=12 * GB)
    fp32 = dataclasses.replace(bf16, name="Tesla P100-PCIE-12GB", capability=(6, 0))
    assert consumer_config(monkeypatch, bf16).micro_batch_size == 8
    assert consumer_config(monkeypatch, fp32).micro_batch_size == 4


def test_the_consumer_recipe_needs_a_gpu_that_holds_one_sequence(monkeypatch):
    monkeypatch.setattr(env, "visible_gpus", lambda: [])
    with pytest.raises(ValueError, match="sees no CUDA GPU: use the smoke profile"):
        lab03_config("consumer")
    with pytest.raises(ValueError, match="does not fit a 2.0 GB GPU even one sequence"):
        micro_batch_for(2 * GB)
