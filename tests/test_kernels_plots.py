"""Lab 09's figures draw what they are given and return the Figure."""

import matplotlib

from llmlab import plots

matplotlib.use("Agg")


def test_accumulation_errors_draws_a_line_per_accumulator_sorted_by_length_on_log_axes():
    errors = {"bf16": {64: 1e-2, 16: 5e-3}, "fp32": {16: 1e-8, 64: 6e-8}}
    ax = plots.accumulation_errors(errors).axes[0]
    assert [line.get_label() for line in ax.lines] == ["bf16", "fp32"]
    assert list(ax.lines[0].get_xdata()) == [16, 64]
    assert list(ax.lines[0].get_ydata()) == [5e-3, 1e-2]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
