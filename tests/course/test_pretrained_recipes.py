"""Lab 03's recipes: the full one stays within about 2 passes over the data it has offline, both
checkpoint mid-run, and a shortened run scales its warm-up instead of never leaving it."""

import pytest

from llmlab.course.pretrained import FULL_TRAIN_TOKENS, lab03_config
from llmlab.train import learning_rate


def test_the_full_recipe_makes_about_two_passes_over_the_offline_corpus():
    c = lab03_config("full")
    tokens = c.max_steps * c.micro_batch_size * c.grad_accum_steps * c.seq_len
    assert 1.5 <= tokens / FULL_TRAIN_TOKENS <= 2.0  # not ~40 passes: that only overfits


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
