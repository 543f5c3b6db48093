"""Lab 07's figures draw what they are given and return the Figure."""

import matplotlib

from llmlab import plots

matplotlib.use("Agg")


def test_quantization_grids_has_a_panel_per_format_and_a_line_per_level():
    grids = {"int4": [-1.0, 0.0, 1.0], "NF4": [-1.0, -0.5, 0.0, 0.5, 1.0]}
    fig = plots.quantization_grids([0.1, -0.3, 0.7, 0.2], grids)
    assert [ax.get_title() for ax in fig.axes] == ["int4: 3 values", "NF4: 5 values"]
    assert [len(ax.lines) for ax in fig.axes] == [3, 5]
    assert [line.get_xdata()[0] for line in fig.axes[1].lines] == grids["NF4"]


def test_layer_errors_draws_a_bar_per_method_and_layer():
    errors = {"RTN": {"a": 0.02, "b": 0.03}, "GPTQ": {"a": 0.005, "b": 0.01}}
    ax = plots.layer_errors(errors).axes[0]
    assert [bar.get_height() for bar in ax.patches] == [0.02, 0.03, 0.005, 0.01]
    assert [label.get_text() for label in ax.get_xticklabels()] == ["a", "b"]
    assert ax.get_yscale() == "log"


def test_bits_vs_perplexity_has_a_series_per_method_a_label_per_point_and_the_float_line():
    points = {"RTN": {"int4, g128": (4.16, 17.3), "int3, per channel": (3.06, 25.0)},
              "GPTQ": {"int4, g128": (4.16, 17.2), "int3, per channel": (3.06, 19.0)}}
    ax = plots.bits_vs_perplexity(points, reference=17.1).axes[0]
    assert [list(c.get_offsets()[:, 1]) for c in ax.collections] == [[17.3, 25.0], [17.2, 19.0]]
    assert len(ax.texts) == 4 and list(ax.lines[0].get_ydata()) == [17.1, 17.1]
