"""Lab 08's figures draw what they are given and return the Figure."""

import matplotlib
import pytest

from llmlab import plots
from llmlab.evaluate.seeds import seed_spread

matplotlib.use("Agg")


def test_finetune_methods_draws_every_seed_and_the_mean_with_its_interval():
    scores = {"base": [2.0, 2.0, 2.0], "full": [8.0, 9.0, 7.0]}
    perplexities = {"base": [10.0, 10.0, 10.0], "full": [12.0, 12.5, 11.5]}
    left, right = plots.finetune_methods(scores, perplexities, before=10.0).axes
    drawn = [tuple(y for _, y in c.get_offsets()) for c in left.collections if c.get_offsets().size]
    assert (2.0, 2.0, 2.0) in drawn and (8.0, 9.0, 7.0) in drawn
    full = seed_spread([8.0, 9.0, 7.0])
    ends = [y for line in left.lines for y in line.get_ydata()]  # means and the intervals' ends
    assert any(y == pytest.approx(full.high) for y in ends)
    assert any(y == pytest.approx(full.low) for y in ends)
    assert any(list(line.get_ydata()) == [10.0, 10.0] for line in right.lines)  # "before"
    assert [label.get_text() for label in right.get_xticklabels()] == ["base", "full"]
    named = [text.get_text() for text in left.get_legend().get_texts()]
    assert named == ["one seed", "mean, 95% interval"]  # each once, though "base" has no interval


def test_bootstrap_draws_marks_the_interval_and_the_observed_difference():
    (ax,) = plots.bootstrap_draws([0.1, 0.2, 0.2, 0.3, 0.9], 0.1, 0.8, 0.25).axes
    assert sum(bar.get_height() for bar in ax.patches) == 5  # every draw is in the histogram
    xs = sorted(line.get_xdata()[0] for line in ax.lines)
    assert xs == [0, 0.1, 0.25, 0.8]
