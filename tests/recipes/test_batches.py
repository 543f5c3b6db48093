"""Lab 03's batches: random windows of the dataset's shards, inputs and next-token targets of the
recipe's shape, the validation windows drawn apart from the training ones, a seed per rank."""

import torch
from helpers.data_samples import sample_texts

from llmlab.data import DatasetSpec, prepare_dataset
from llmlab.recipes import batches, lab03_config


def test_the_batches_are_windows_of_the_datasets_shards(tmp_path, monkeypatch):
    texts = tmp_path / "texts"
    texts.mkdir()
    for number, text in enumerate(sample_texts()):
        (texts / f"{number}.txt").write_text(text)
    dataset = prepare_dataset(tmp_path / "built", DatasetSpec(str(texts), vocab_size=300))
    monkeypatch.setattr(batches, "prepare_default_dataset", lambda folder, profile: dataset)
    config = lab03_config("smoke", seq_len=16, micro_batch_size=2)
    data = batches.lab03_data("smoke", config)
    inputs, targets = data.train.next_batch()
    assert data.dataset is dataset and inputs.shape == targets.shape == (2, 16)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets: the inputs shifted by one
    assert not torch.equal(inputs, data.val.next_batch()[0])  # another split, another seed
    again = batches.lab03_data("smoke", config, seed=1).train.next_batch()[0]
    assert not torch.equal(inputs, again)  # each rank draws its own windows
