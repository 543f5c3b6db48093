"""A model folder whose weights are a pickle (pytorch_model.bin) instead of safetensors, its
checksums recorded again: what a loader must refuse, since unpickling can run code."""

from pathlib import Path

import torch

from llmlab.files import write_folder_checksums


def pickle_the_weights(folder: Path, model: torch.nn.Module) -> None:
    (Path(folder) / "model.safetensors").unlink()
    torch.save(model.state_dict(), Path(folder) / "pytorch_model.bin")
    write_folder_checksums(folder)
