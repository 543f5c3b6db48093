"""Lab 05's figures: all-reduce time against ranks, and each rank's step times; Lab 04's
pipeline schedules as time lines."""

import matplotlib

from llmlab import plots

matplotlib.use("Agg")


def test_allreduce_times_draws_a_line_per_tensor_and_its_limit():
    seconds = {"1 KB": {2: 1e-5, 8: 7e-5}, "1 GB": {2: 0.02, 8: 0.035}}
    ax = plots.allreduce_times(seconds, limits={"1 GB": 0.04}).axes[0]
    lines = ax.get_lines()
    assert [line.get_label() for line in lines[:1]] == ["1 KB"]
    assert list(lines[1].get_ydata()) == [20.0, 35.0]  # milliseconds
    assert list(lines[2].get_ydata()) == [40.0, 40.0]  # the dashed limit
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_step_times_by_rank_shows_each_ranks_median_and_the_threshold():
    steps = [[1.0, 1.0, 2.0], [1.0, 3.0, 2.0], [1.0, 1.0, 2.0]]
    ax = plots.step_times_by_rank(steps, 0.5).axes[0]
    assert [bar.get_height() for bar in ax.patches] == [1.0, 1.0, 2.0]  # one disturbed step
    lines = {line.get_label(): line.get_ydata() for line in ax.get_lines()}
    assert list(lines["median rank"]) == [1.0, 1.0]
    assert list(lines["threshold: 50% slower"]) == [1.5, 1.5]


def test_pipeline_schedules_draws_a_box_per_piece_of_work_and_the_idle_share():
    from llmlab.scale.schedules import schedule_time_line

    lines = {"1F1B": schedule_time_line("1f1b", 2, 3),
             "ZB-H1": schedule_time_line("zb-h1", 2, 3)}
    axes = plots.pipeline_schedules(lines).axes
    assert [ax.get_title(loc="left") for ax in axes] == ["1F1B: idle 25% of the step",
                                                         "ZB-H1: idle 10% of the step"]
    # One box per piece: 2 stages x 3 micro-batches x (F, B) and x (F, B, W).
    assert [len(ax.collections) for ax in axes] == [12, 18]
    assert [ax.get_yticklabels()[1].get_text() for ax in axes] == ["stage 1", "stage 1"]
