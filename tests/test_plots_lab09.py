"""Lab 09's figures (a profiled step's timeline, operators on a roofline, attention's memory,
accumulation errors, time per generated token) draw what they are given and return the Figure."""

import matplotlib

from llmlab import plots
from llmlab.profiler import RooflinePoint

matplotlib.use("Agg")


def test_step_timeline_has_a_row_per_kind_and_shades_each_phase():
    bars = {"matmul": [(0.0, 2.0), (5.0, 0.5)], "GELU": [(3.0, 1.0)]}
    phases = {"forward": (0.0, 3.0), "backward": (3.0, 6.0)}
    fig = plots.step_timeline(bars, phases)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["matmul", "GELU"]
    assert len(ax.collections) == 2  # one broken_barh per row
    assert len(ax.patches) == 2  # a shaded span per phase
    assert [t.get_text() for t in ax.texts] == ["forward", "backward"]


def test_step_timeline_draws_memory_in_mib_below_when_given():
    fig = plots.step_timeline({"matmul": [(0.0, 1.0)]}, {"forward": (0.0, 1.0)},
                              memory=([0.0, 1.0], [2**20, 3 * 2**20]))
    top, bottom = fig.axes
    assert list(bottom.lines[0].get_ydata()) == [1.0, 3.0]


def test_operator_roofline_draws_the_roof_the_ridge_and_a_point_per_operator():
    points = [RooflinePoint("gelu", 8e6, 8e6, 1e-3), RooflinePoint("mm", 2e9, 2e7, 0.1)]
    ax = plots.operator_roofline(points, bandwidth_gbs=10, peak_tflops=0.03).axes[0]
    roof = ax.lines[0]
    assert max(roof.get_ydata()) == 30  # the peak, in GFLOP/s
    assert ax.lines[1].get_xdata()[0] == 3.0  # the ridge: 30 GFLOP/s over 10 GB/s
    assert len(ax.collections) == 2
    assert [t.get_text() for t in ax.get_legend().get_texts()][-2:] == ["gelu", "mm"]


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


def test_generation_step_times_draws_milliseconds_from_the_prompts_length():
    (ax,) = plots.generation_step_times({"recompute": [0.01, 0.02, 0.03],
                                         "KV cache": [0.01, 0.001, 0.001]}, 16).axes
    first, second = ax.lines
    assert list(first.get_xdata()) == [16, 17, 18]
    assert list(first.get_ydata()) == [10.0, 20.0, 30.0]
    assert list(second.get_ydata()) == [10.0, 1.0, 1.0]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["recompute", "KV cache"]
