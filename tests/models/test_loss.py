"""The next-token loss: it agrees with transformers' own (the model shifts the labels itself),
skips the -100 targets, takes bf16 logits in float32, reads a plain module's logits as a
transformers model's, and is the only cross-entropy in llmlab: a second one is caught."""

import pytest
import torch
from helpers.definitions import PACKAGE, calls
from helpers.evaluation import TINY

from llmlab.models import (
    build_model,
    cross_entropy_on_ids,
    next_token_cross_entropy,
    next_token_loss,
)

CROSS_ENTROPIES = {"cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss"}


def test_the_loss_agrees_with_transformers_own():
    model = build_model(TINY, seed=0)
    ids = torch.randint(0, TINY.vocab_size, (3, 17), generator=torch.Generator().manual_seed(0))
    expected = model(ids, labels=ids).loss
    assert cross_entropy_on_ids(model(ids).logits, ids).item() == pytest.approx(expected.item())
    # position t of ids[:, :-1] sees what position t of ids sees: the model is causal
    assert next_token_loss(model, ids[:, :-1], ids[:, 1:]).item() == pytest.approx(expected.item())


def test_minus_100_targets_count_for_nothing_and_the_sum_is_a_sum():
    logits = torch.randn(2, 5, 11, generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(2))
    masked = targets.clone()
    masked[:, :2] = -100
    kept = next_token_cross_entropy(logits[:, 2:], targets[:, 2:], reduction="sum")
    assert next_token_cross_entropy(logits, masked, reduction="sum") == pytest.approx(kept.item())
    assert next_token_cross_entropy(logits, masked) == pytest.approx(kept.item() / 6)


def test_bf16_logits_are_scored_in_float32():
    logits = torch.randn(1, 4, 7, generator=torch.Generator().manual_seed(3)).bfloat16()
    targets = torch.tensor([[1, 2, 3, 4]])
    loss = next_token_cross_entropy(logits, targets)
    assert loss.dtype == torch.float32
    assert loss == next_token_cross_entropy(logits.float(), targets)


def test_a_plain_module_returning_logits_is_read_like_a_transformers_model():
    embed = torch.nn.Embedding(9, 9)
    ids = torch.randint(0, 9, (2, 6), generator=torch.Generator().manual_seed(4))
    expected = next_token_cross_entropy(embed(ids[:, :-1]), ids[:, 1:])
    assert next_token_loss(embed, ids[:, :-1], ids[:, 1:]) == expected


def test_the_next_token_loss_is_the_only_cross_entropy_in_llmlab():
    assert calls(PACKAGE, CROSS_ENTROPIES) == ["llmlab/models/loss.py:next_token_cross_entropy"]


@pytest.mark.parametrize("source", [
    "F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())",
    "torch.nn.functional.nll_loss(logits.log_softmax(-1), targets)",
    "nn.CrossEntropyLoss()(logits, targets)",
])
def test_a_second_cross_entropy_is_caught(tmp_path, source):
    path = tmp_path / "llmlab" / "distributed" / "pipeline.py"
    path.parent.mkdir(parents=True)
    path.write_text(f"def loss_on(logits, ids, targets):\n    return {source}\n")
    assert calls(tmp_path / "llmlab", CROSS_ENTROPIES) == ["llmlab/distributed/pipeline.py:loss_on"]
