"""The paired perplexity ratio: the ratio itself, and a noise that comes from the differences."""

import math

import pytest
import torch
from torch import nn

from llmlab.evaluate import paired_perplexity_ratio, perplexity


class Fixed(nn.Module):
    """Logits that favour token 0 (never a target here) by `margin`: a larger margin is worse."""

    def __init__(self, vocab: int = 8, margin: float = 1.0, per_window=None):
        super().__init__()
        self.vocab, self.margin, self.per_window = vocab, margin, per_window
        self.anchor = nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        logits = torch.zeros(*ids.shape, self.vocab)
        margin = self.margin if self.per_window is None else self.per_window[int(ids[0, 0])]
        logits[..., 0] = margin
        return type("Out", (), {"logits": logits})()


def windows(n: int = 6, length: int = 5) -> list[torch.Tensor]:
    # Window i starts with token i (the Fixed model reads it) and then predicts tokens 1..
    return [torch.tensor([i] + [1 + (i + j) % 7 for j in range(length - 1)]) for i in range(n)]


def test_the_same_model_twice_is_a_ratio_of_one_with_no_noise():
    model = Fixed()
    paired = paired_perplexity_ratio(model, model, windows())
    assert paired.ratio == pytest.approx(1.0) and paired.noise == pytest.approx(0.0)


def test_a_uniformly_worse_model_is_worse_by_its_perplexity_ratio_with_no_noise():
    """Every window loses the same: no noise, however much the windows' own losses differ."""
    better, worse = Fixed(margin=1.0), Fixed(margin=2.0)
    w = windows()
    paired = paired_perplexity_ratio(worse, better, w)
    assert paired.ratio == pytest.approx(perplexity(worse, w) / perplexity(better, w))
    assert paired.noise == pytest.approx(0.0, abs=1e-12)


def test_the_noise_is_two_standard_errors_of_the_per_window_differences():
    reference = Fixed(margin=1.0)
    margins = [1.0, 1.5, 1.0, 2.0, 1.0, 1.2]  # worse on some windows only
    model = Fixed(per_window=margins)
    w = windows()
    differences = torch.tensor([perplexity(model, [x]) for x in w]).log() - torch.tensor(
        [perplexity(reference, [x]) for x in w]).log()
    expected = math.exp(2 * differences.double().std().item() / math.sqrt(len(w))) - 1
    paired = paired_perplexity_ratio(model, reference, w)
    assert paired.noise == pytest.approx(expected, rel=1e-6) and paired.noise > 0
    assert paired.ratio == pytest.approx(math.exp(differences.double().mean().item()), rel=1e-6)
    assert str(paired).startswith("x1.")


def test_too_few_windows_or_windows_of_several_lengths_are_refused():
    with pytest.raises(ValueError, match="at least 2 windows"):
        paired_perplexity_ratio(Fixed(), Fixed(), windows(1))
    with pytest.raises(ValueError, match="one length"):
        paired_perplexity_ratio(Fixed(), Fixed(), windows(3) + windows(2, length=7))
