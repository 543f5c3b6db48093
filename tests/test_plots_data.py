"""Lab 01's figures draw what they are given and return the Figure."""

import matplotlib

from llmlab import plots
from llmlab.data.packing import packing_cost, pad_to_length_cost

matplotlib.use("Agg")


def test_document_lengths_draws_one_histogram_and_median_per_source():
    fig = plots.document_lengths({"code": [100, 2000, 30000], "prose": [50, 400, 0]})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert len(ax.lines) == 2  # the two medians
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "code (3 documents)",
        "prose (2 documents)",  # empty documents cannot sit on a log axis
    ]


def test_tokens_per_word_groups_bars_by_granularity():
    rates = {"bytes": {"code": 8.0, "prose": 6.0}, "BPE": {"code": 2.3, "prose": 1.6}}
    ax = plots.tokens_per_word(rates).axes[0]
    assert len(ax.patches) == 4
    assert [t.get_text() for t in ax.get_xticklabels()] == ["bytes", "BPE"]


def test_padding_waste_has_one_line_per_strategy_in_each_panel():
    lengths = [10, 300, 5000]
    costs = [f(lengths, n) for n in (128, 512) for f in (pad_to_length_cost, packing_cost)]
    left, right = plots.padding_waste(costs).axes
    assert len(left.lines) == len(right.lines) == 2
    assert list(left.lines[1].get_ydata()) == [0.0, 0.0]  # packing wastes no compute


def test_pipeline_throughput_has_a_bar_per_stage():
    fig = plots.pipeline_throughput({"read": 300.0, "tokenize": 2.0})
    assert len(fig.axes[0].patches) == 2


def test_lsh_s_curve_draws_a_line_per_shape_and_the_pairs_at_0_or_1():
    ax = plots.lsh_s_curve({"16 x 8": [0.0, 0.5, 1.0], "8 x 16": [0.0, 0.1, 1.0]}, [0, 0.5, 1],
                           [(0.9, True), (0.2, False)]).axes[0]
    assert [list(line.get_ydata()) for line in ax.lines] == [[0.0, 0.5, 1.0], [0.0, 0.1, 1.0]]
    assert ax.collections[0].get_offsets().tolist() == [[0.9, 1.0], [0.2, 0.0]]
