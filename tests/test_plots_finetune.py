"""Lab 08's figure draws what it is given and returns the Figure."""

import matplotlib

from llmlab import plots

matplotlib.use("Agg")


def test_finetune_methods_draws_scores_with_intervals_and_perplexity_before_and_after():
    scores = {"base": (2.0, 1.0, 3.5), "full": (8.0, 6.0, 9.0)}
    perplexities = {"full": (10.0, 12.0), "LoRA": (10.0, 10.5)}
    left, right = plots.finetune_methods(scores, perplexities).axes
    assert [bar.get_height() for bar in left.patches] == [2.0, 8.0]
    caps = [y for line in left.lines for y in line.get_ydata()]  # the intervals' ends, drawn
    assert sorted(caps) == [1.0, 3.5, 6.0, 9.0]
    assert [bar.get_height() for bar in right.patches] == [10.0, 10.0, 12.0, 10.5]
    assert [label.get_text() for label in right.get_xticklabels()] == ["full", "LoRA"]
