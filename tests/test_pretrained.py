"""Later labs get Lab 03's model: loaded from the artifacts folder when Lab 03 saved it, trained
with Lab 03's recipe when it did not."""

import pytest
from train_fakes import tiny_gpt2
from transformers import GPT2LMHeadModel

from llmlab.course import pretrained
from llmlab.train import TrainConfig


@pytest.fixture
def artifacts(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMLAB_ARTIFACTS", str(tmp_path))
    return tmp_path


def test_a_saved_model_is_loaded_without_training(artifacts, monkeypatch):
    from test_train_interop import tiny_tokenizer

    saved = tiny_gpt2()
    folder = pretrained.save_trained_model(saved, tiny_tokenizer(), "smoke")
    assert folder == artifacts / "lab03-smoke-model" and not list(artifacts.glob("*.tmp"))
    monkeypatch.setattr(pretrained, "train_lab03_model", lambda *a, **k: pytest.fail("trained"))
    model, tokenizer = pretrained.trained_model("smoke")
    assert isinstance(model, GPT2LMHeadModel)
    assert model.state_dict()["transformer.wte.weight"].equal(saved.transformer.wte.weight)
    assert tokenizer.eos_token == "<|endoftext|>"


def test_a_missing_model_is_trained_with_the_recipe_then_saved(artifacts, monkeypatch):
    recipe = pretrained.lab03_config

    def two_steps(profile_name, **changes):
        return recipe(profile_name, **{**changes, "max_steps": 2, "eval_interval": 1})

    monkeypatch.setattr(pretrained, "lab03_config", two_steps)
    model, tokenizer = pretrained.trained_model("smoke", progress=False)
    assert (artifacts / "lab03-smoke-model" / "model.safetensors").is_file()
    assert model.config.vocab_size == len(tokenizer) == 8192


def test_the_recipes_are_valid_configs():
    for profile_name in ("smoke", "full"):
        assert isinstance(pretrained.lab03_config(profile_name), TrainConfig)
    with pytest.raises(ValueError, match="unknown profile"):
        pretrained.lab03_config("huge")
