"""Next-token scores on tiny random models: loss, perplexity and accuracy agree with a reference,
and the plausible mistakes (mean of window means, an off-by-one target) are caught."""

import math
from types import SimpleNamespace

import pytest
import torch
from helpers.definitions import PACKAGE, calls
from helpers.evaluation import TINY
from torch import nn

from llmlab.evaluate import (
    TokenScores,
    held_out_windows,
    next_token_accuracy,
    perplexity,
    perplexity_of,
    score_tokens,
)
from llmlab.models import build_model

ATOL = 1e-5  # float32 sums over a few hundred tokens
LOSS_WORDS = r"loss|nll|entropy"  # an exponential of one of these is a perplexity


def transformers_loss(model, windows):
    """The model's own loss (transformers shifts the labels itself), weighted by tokens."""
    model.eval()
    with torch.no_grad():
        losses = [(model(w[None], labels=w[None]).loss.item(), w.numel() - 1) for w in windows]
    return sum(loss * n for loss, n in losses) / sum(n for _, n in losses)


def mean_of_window_means(model, windows):
    """A plausible mistake: every window weighs the same, whatever its length."""
    model.eval()
    with torch.no_grad():
        return sum(model(w[None], labels=w[None]).loss.item() for w in windows) / len(windows)


@pytest.fixture(scope="module")
def model():
    return build_model(TINY, seed=0)


def test_loss_agrees_with_transformers_on_one_window(model, uneven_windows):
    window = uneven_windows[:1]
    assert score_tokens(model, window).loss == pytest.approx(transformers_loss(model, window),
                                                             abs=ATOL)


def test_perplexity_is_token_weighted_over_uneven_windows(model, uneven_windows):
    scores = score_tokens(model, uneven_windows, batch_size=3)
    assert scores.tokens == 199
    assert scores.loss == pytest.approx(transformers_loss(model, uneven_windows), abs=ATOL)
    assert scores.perplexity == pytest.approx(math.exp(scores.loss))
    # The check can fail: the mean of window means misses it by far more than the tolerance.
    assert abs(mean_of_window_means(model, uneven_windows) - scores.loss) > 100 * ATOL
    # Batching changes nothing.
    assert score_tokens(model, uneven_windows, batch_size=1).loss == pytest.approx(scores.loss)


class NextIdModel(nn.Module):
    """Always predicts token id + 1: right on a counting sequence, wrong on a constant one."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab
        self.unused = nn.Parameter(torch.zeros(1))  # score_tokens reads the device from here

    def forward(self, ids):
        return SimpleNamespace(logits=nn.functional.one_hot((ids + 1) % self.vocab, self.vocab)
                               .float())


def test_accuracy_compares_each_prediction_with_the_next_token():
    counting = held_out_windows(torch.arange(50) % 7, seq_len=8)
    assert next_token_accuracy(NextIdModel(7), counting) == 1.0
    # Compared with the inputs instead of the targets (an off-by-one), this would be 1.0.
    constant = held_out_windows(torch.full((50,), 3), seq_len=8)
    assert next_token_accuracy(NextIdModel(7), constant) == 0.0


def test_score_refuses_bad_windows(model):
    with pytest.raises(ValueError, match="no windows"):
        score_tokens(model, [])
    with pytest.raises(ValueError, match="length >= 2"):
        score_tokens(model, [torch.tensor([1])])


@pytest.mark.parametrize("score", [score_tokens, perplexity, next_token_accuracy])
def test_a_model_with_a_nan_weight_is_refused_by_name(uneven_windows, score):
    # one NaN weight made perplexity nan and accuracy a plausible 0.016 (argmax of NaN logits)
    model = build_model(TINY, seed=0)
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[2, 3] = math.nan
    with pytest.raises(ValueError, match=r"the model's loss is nan on these windows: "
                       r"transformer.h.1.mlp.c_fc.weight holds 1 NaN or inf value\(s\), the first "
                       r"at index \(2, 3\)"):
        score(model, uneven_windows)
    assert model.training  # left in the mode it was in


class Overflowing(NextIdModel):
    """Finite weights, infinite logits: what an fp16 activation overflow gives."""

    def forward(self, ids):
        return SimpleNamespace(logits=super().forward(ids).logits * math.inf)


def test_a_non_finite_loss_from_finite_weights_says_so():
    windows = held_out_windows(torch.arange(50) % 7, seq_len=8)
    with pytest.raises(ValueError, match="the model's loss is nan on these windows, though "
                       "every weight is finite: .*overflow"):
        score_tokens(Overflowing(7), windows)


def test_perplexity_of_a_loss_is_guarded_against_overflow():
    assert perplexity_of(math.log(20.0)) == pytest.approx(20.0)
    assert perplexity_of(800.0) == math.inf  # math.exp raises OverflowError above 709.78
    assert perplexity_of(None) is None
    assert TokenScores(nll_sum=3 * 800.0, correct=0, tokens=3).perplexity == math.inf


def test_perplexity_of_is_the_only_exponential_of_a_loss_in_llmlab():
    found = calls(PACKAGE, {"exp"}, mentioning=LOSS_WORDS)
    assert found == ["llmlab/evaluate/next_token.py:perplexity_of"]


@pytest.mark.parametrize("source", ["math.exp(loss.item())", "torch.exp(mean_nll)",
                                    "val_loss.exp()", "np.exp(self.cross_entropy)"])
def test_a_second_perplexity_is_caught(tmp_path, source):
    path = tmp_path / "llmlab" / "inference" / "engines.py"
    path.parent.mkdir(parents=True)
    path.write_text(f"def engine_rows(loss, mean_nll, val_loss, self):\n    return {source}\n")
    found = calls(tmp_path / "llmlab", {"exp"}, mentioning=LOSS_WORDS)
    assert found == ["llmlab/inference/engines.py:engine_rows"]
