"""Lab 06's figures draw what they are given and return the Figure."""

import matplotlib

from llmlab import plots

matplotlib.use("Agg")


def test_weight_histograms_has_a_panel_per_kind_and_a_histogram_per_layer():
    groups = {"attn": {"layer 0": [0.1, 0.2, 0.3], "layer 1": [0.5, 0.01]},
              "mlp": {"layer 0": [1.0, 2.0]}}
    fig = plots.weight_histograms(groups)
    assert [ax.get_title() for ax in fig.axes] == ["attn", "mlp"]
    assert len(fig.axes[0].patches) == 2 and len(fig.axes[1].patches) == 1


def test_perplexity_vs_sparsity_sorts_the_points_and_draws_the_dense_line():
    fig = plots.perplexity_vs_sparsity({"global": {0.5: 20.0, 0.0: 10.0, 0.9: 300.0}}, dense=10.0)
    ax = fig.axes[0]
    assert list(ax.lines[0].get_xdata()) == [0.0, 0.5, 0.9]
    assert list(ax.lines[0].get_ydata()) == [10.0, 20.0, 300.0]
    assert len(ax.lines) == 2 and ax.get_yscale() == "log"


def test_sensitivity_scan_has_a_line_per_layer_and_the_dense_reference():
    scan = {"mlp.c_fc": {"layer 0": {0.3: 11.0, 0.9: 40.0}, "layer 1": {0.3: 10.5, 0.9: 15.0}}}
    ax = plots.sensitivity_scan(scan, dense=10.0).axes[0]
    assert len(ax.lines) == 3
    assert list(ax.lines[1].get_ydata()) == [10.5, 15.0]


def test_sparsity_schedules_plots_one_line_per_schedule():
    ax = plots.sparsity_schedules({"cubic": [0.0, 0.5, 0.8], "one-shot": [0.8] * 3}).axes[0]
    assert len(ax.lines) == 2 and ax.get_ylim() == (0.0, 1.0)


def test_per_window_perplexity_draws_a_bar_per_window_and_the_overall_line():
    ax = plots.per_window_perplexity([5.0, 80.0, 12.0], overall=17.2, marked=1).axes[0]
    assert [bar.get_height() for bar in ax.patches] == [5.0, 80.0, 12.0]
    assert ax.patches[0].get_facecolor() != ax.patches[1].get_facecolor()  # the marked subset
    assert list(ax.lines[0].get_ydata()) == [17.2, 17.2] and ax.get_yscale() == "log"
