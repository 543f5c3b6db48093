"""Lab 09's kernel figure draws what it is given and returns the Figure."""

import matplotlib

from llmlab import plots

matplotlib.use("Agg")


def test_attention_memory_draws_a_line_per_curve_and_the_limit():
    curves = {"scores": [4.0, 16.0, 64.0], "tiles": [2.0, 4.0, 8.0]}
    ax = plots.attention_memory([2, 4, 8], curves, limit=("80 GB", 80.0)).axes[0]
    assert [list(line.get_ydata()) for line in ax.lines[:2]] == [[4.0, 16.0, 64.0], [2.0, 4.0, 8.0]]
    assert list(ax.lines[2].get_ydata()) == [80.0, 80.0]  # the dashed limit
    assert [text.get_text() for text in ax.texts] == ["80 GB"]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
