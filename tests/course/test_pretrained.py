"""Later labs get Lab 03's model: loaded from the artifacts folder when Lab 03 saved it, trained
with Lab 03's recipe when it did not."""

import json

import pytest
from helpers.fake_machines import T4
from helpers.model_files import pickle_the_weights
from helpers.train_fakes import tiny_gpt2, tiny_tokenizer
from transformers import GPT2LMHeadModel

from llmlab import env
from llmlab.course import pretrained
from llmlab.files import write_folder_checksums
from llmlab.train import TrainConfig


@pytest.fixture
def artifacts(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMLAB_ARTIFACTS", str(tmp_path))
    return tmp_path


def test_a_saved_model_is_loaded_without_training(artifacts, monkeypatch):
    saved = tiny_gpt2()
    folder = pretrained.save_trained_model(saved, tiny_tokenizer(), "smoke")
    assert folder == artifacts / "lab03-smoke-model" and not list(artifacts.glob("*.tmp"))
    monkeypatch.setattr(pretrained, "train_lab03_model", lambda *a, **k: pytest.fail("trained"))
    model, tokenizer = pretrained.trained_model("smoke")
    assert isinstance(model, GPT2LMHeadModel)
    assert model.state_dict()["transformer.wte.weight"].equal(saved.transformer.wte.weight)
    assert tokenizer.eos_token == "<|endoftext|>"


def test_the_consumer_model_is_kept_apart_from_the_full_one(artifacts, monkeypatch):
    """Labs 06-10 at consumer load the model Lab 03 trained at consumer: same model and data as
    full, its own folder, its own recipe stamp (micro-batches of 8 on a T4)."""
    monkeypatch.setattr(env, "visible_gpus", lambda: [T4])
    folder = pretrained.save_trained_model(tiny_gpt2(), tiny_tokenizer(), "consumer")
    assert folder == artifacts / "lab03-consumer-model" != pretrained.model_folder("full")
    monkeypatch.setattr(pretrained, "train_lab03_model", lambda *a, **k: pytest.fail("trained"))
    pretrained.trained_model("consumer")
    consumer, full = pretrained.recipe_stamp("consumer"), pretrained.recipe_stamp("full")
    assert consumer["recipe"]["micro_batch_size"] == 8 != full["recipe"]["micro_batch_size"]
    assert {k: v for k, v in consumer.items() if k != "recipe"} == (
        {k: v for k, v in full.items() if k != "recipe"})


def test_a_missing_model_is_trained_with_the_recipe_then_saved(artifacts, monkeypatch):
    recipe = pretrained.lab03_config

    def two_steps(profile_name, **changes):
        return recipe(profile_name, **{**changes, "max_steps": 2, "eval_interval": 1})

    monkeypatch.setattr(pretrained, "lab03_config", two_steps)
    model, tokenizer = pretrained.trained_model("smoke", progress=False)
    assert (artifacts / "lab03-smoke-model" / "model.safetensors").is_file()
    assert model.config.vocab_size == len(tokenizer) == 2048


def test_a_model_from_another_recipe_is_trained_again(artifacts, monkeypatch):
    """A model saved before the recipe changed (or before recipes were recorded) is not reused:
    later labs would read a new tokenizer's ids with an old model."""
    folder = pretrained.save_trained_model(tiny_gpt2(), tiny_tokenizer(), "smoke")
    assert pretrained.why_train_again("smoke") is None
    trained = []
    monkeypatch.setattr(pretrained, "train_lab03_model", lambda *a, **k: trained.append(1))
    stamp = folder / pretrained.RECIPE_FILE
    changed = json.loads(stamp.read_text())
    changed["recipe"]["max_steps"] += 1
    stamp.write_text(json.dumps(changed))
    write_folder_checksums(folder)  # saved whole, by another recipe
    pretrained.trained_model("smoke")
    stamp.unlink()  # a model saved before recipes were recorded
    pretrained.trained_model("smoke")
    assert len(trained) == 2
    assert "another recipe" in pretrained.why_train_again("smoke")


def test_a_damaged_model_is_trained_again(artifacts, monkeypatch):
    folder = pretrained.save_trained_model(tiny_gpt2(), tiny_tokenizer(), "smoke")
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF  # a flipped byte in the last tensor
    weights.write_bytes(bytes(data))
    assert "is damaged: model.safetensors" in pretrained.why_train_again("smoke")
    trained = []
    monkeypatch.setattr(pretrained, "train_lab03_model", lambda *a, **k: trained.append(1))
    pretrained.trained_model("smoke")
    assert trained == [1]


def test_a_model_with_pickled_weights_is_not_unpickled(artifacts):
    saved = tiny_gpt2()
    pickle_the_weights(pretrained.save_trained_model(saved, tiny_tokenizer(), "smoke"), saved)
    with pytest.raises(OSError, match="no file named model.safetensors"):
        pretrained.trained_model("smoke")


def test_two_labs_asking_at_once_train_one_model(artifacts, monkeypatch):
    """The second caller waits on the lock while the first trains, then loads what it saved.
    Without the lock the second would look for the model during the first one's training (the
    training below waits up to 2 s for that look) and train a second copy."""
    import threading

    trainings, looks = [], []
    started, second_looked = threading.Event(), threading.Event()
    real_check = pretrained.why_train_again

    def watched_check(profile_name):
        looks.append(profile_name)
        if len(looks) == 2:
            second_looked.set()
        return real_check(profile_name)

    def slow_training(profile_name, progress=True):
        trainings.append(profile_name)
        started.set()
        second_looked.wait(2)
        pretrained.save_trained_model(tiny_gpt2(), tiny_tokenizer(), profile_name)

    monkeypatch.setattr(pretrained, "why_train_again", watched_check)
    monkeypatch.setattr(pretrained, "train_lab03_model", slow_training)
    first = threading.Thread(target=pretrained.trained_model, args=("smoke",))
    first.start()
    started.wait(10)
    second = threading.Thread(target=pretrained.trained_model, args=("smoke",))
    second.start()
    first.join(30)
    second.join(30)
    assert trainings == ["smoke"] and len(looks) == 2


def test_two_threads_never_load_the_model_at_once(artifacts, monkeypatch):
    """from_pretrained swaps PreTrainedModel.tie_weights for a no-op while it loads: two loads at
    once in one process could leave the no-op behind (the second saves it as "the original"), and
    every GPT-2 built afterwards in that process had its LM head untied from its embedding. Each
    load below waits up to 1 s inside for another to join it; under the lock none ever does."""
    import threading

    pretrained.save_trained_model(tiny_gpt2(), tiny_tokenizer(), "smoke")
    loading, most_at_once, other_entered = [], [], threading.Event()
    real_load = pretrained.AutoModelForCausalLM.from_pretrained

    def watched_load(folder, **options):
        loading.append(folder)
        most_at_once.append(len(loading))
        if len(loading) > 1:
            other_entered.set()
        other_entered.wait(1)
        try:
            return real_load(folder, **options)
        finally:
            loading.pop()

    monkeypatch.setattr(pretrained.AutoModelForCausalLM, "from_pretrained", watched_load)
    threads = [threading.Thread(target=pretrained.trained_model, args=("smoke",)) for _ in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert most_at_once == [1, 1]


def test_a_full_model_from_the_other_corpus_is_trained_again(monkeypatch):
    """The stamp names the corpus: a model trained offline is not reused online, and back."""
    monkeypatch.setattr(pretrained, "lab03_config", lambda profile_name: TrainConfig())
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    assert pretrained.recipe_stamp("full")["corpus"] == "fineweb-edu"
    monkeypatch.delenv("LLMLAB_ONLINE")
    assert pretrained.recipe_stamp("full")["corpus"] == "builtin"
