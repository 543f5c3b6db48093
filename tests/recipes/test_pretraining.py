"""Lab 03's recipes: valid settings for both profiles, the full one's length comes from its data
(about 2 passes over the built-in corpus offline, 1 over the FineWeb-Edu sample online), both
checkpoint mid-run, and a shortened run scales its warm-up instead of never leaving it."""

from types import SimpleNamespace

import pytest

from llmlab.recipes import pretraining
from llmlab.recipes.pretraining import FULL_TRAIN_TOKENS, lab03_config
from llmlab.train import TrainConfig, learning_rate


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
