"""Lab 03's figures draw what they are given and return the Figure."""

import matplotlib

from llmlab import plots

matplotlib.use("Agg")


def test_singular_values_are_drawn_largest_first_on_a_log_scale():
    ax = plots.singular_values({"gradient": [0.5, 3.0, 0.01], "orthogonalised": [1, 0.9, 1.1]},
                               title="t").axes[0]
    assert ax.get_yscale() == "log" and ax.get_title() == "t"
    assert list(ax.lines[0].get_ydata()) == [3.0, 0.5, 0.01]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["gradient", "orthogonalised"]
