"""Data for training: corpora, cleaning, tokenizers, packing, token shards and loaders.

The modules, in the order data flows through them:
corpus (and documents, bad_rows, manifest) -> clean -> tokenization -> packing -> shards -> loaders;
pipeline chains them into `prepare_default_dataset`, which later labs call.
"""

from llmlab.data.errors import DataError
from llmlab.data.pipeline import DatasetPaths, DatasetSpec, prepare_dataset, prepare_default_dataset

__all__ = ["DataError", "DatasetPaths", "DatasetSpec", "prepare_dataset", "prepare_default_dataset"]
