"""Lab 03's trained model, kept for the labs that start from a trained model.

`trained_model(profile)` loads the model Lab 03 saved in the artifacts folder; when it is not
there (a lab run on its own, a fresh checkout), or was trained with another recipe, it trains one
now with today's recipe (llmlab.recipes), so every lab also runs alone.
"""

import json
from pathlib import Path

from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from llmlab.data.pipeline import profile_spec
from llmlab.files import (
    DamagedFile,
    atomic_folder,
    exclusive_lock,
    verify_folder,
    write_folder_checksums,
)
from llmlab.models import build_model, training_flops_per_token
from llmlab.recipes import MODEL_PRESET, artifacts_dir, lab03_config, lab03_data, lab03_shape
from llmlab.train import Trainer, TrainResult


def model_folder(profile_name: str) -> Path:
    return artifacts_dir() / f"lab03-{profile_name}-model"


RECIPE_FILE = "lab03-recipe.json"


def recipe_stamp(profile_name: str) -> dict:
    """What a saved model was trained with: the recipe, the model preset and the dataset."""
    recipe = lab03_config(profile_name).to_dict()
    recipe.pop("progress")  # a progress bar changes nothing in the model
    spec = profile_spec(profile_name)
    return {"recipe": recipe, "model": MODEL_PRESET[profile_name], "corpus": spec.corpus,
            "vocab_size": spec.vocab_size}


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
                      flops_per_token=flops, measure_peak=True)
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
