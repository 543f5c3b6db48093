"""Lab 09's figures draw what they are given and return the Figure."""

import matplotlib

from llmlab import plots

matplotlib.use("Agg")


def test_attention_memory_draws_a_line_per_curve_and_the_limit():
    curves = {"scores": [4.0, 16.0, 64.0], "tiles": [2.0, 4.0, 8.0]}
    ax = plots.attention_memory([2, 4, 8], curves, limit=("80 GB", 80.0)).axes[0]
    assert [list(line.get_ydata()) for line in ax.lines[:2]] == [[4.0, 16.0, 64.0], [2.0, 4.0, 8.0]]
    assert list(ax.lines[2].get_ydata()) == [80.0, 80.0]  # the dashed limit
    assert [text.get_text() for text in ax.texts] == ["80 GB"]


def test_accumulation_errors_draws_a_line_per_accumulator_sorted_by_length_on_log_axes():
    errors = {"bf16": {64: 1e-2, 16: 5e-3}, "fp32": {16: 1e-8, 64: 6e-8}}
    ax = plots.accumulation_errors(errors).axes[0]
    assert [line.get_label() for line in ax.lines] == ["bf16", "fp32"]
    assert list(ax.lines[0].get_xdata()) == [16, 64]
    assert list(ax.lines[0].get_ydata()) == [5e-3, 1e-2]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
