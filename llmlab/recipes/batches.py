"""Lab 03's batches: Lab 01's tokenizer and token shards (built now if missing) as random-window
batch sources, for `llmlab train` and every lab that trains on them."""

from dataclasses import dataclass

from llmlab.data import DatasetPaths, prepare_default_dataset
from llmlab.data.loaders import RandomWindows
from llmlab.recipes.artifacts import artifacts_dir
from llmlab.train import TrainConfig


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
