"""Lab 11's figures (experts' load over steps, attention's work per rank) draw what they are
given and return the Figure."""

import matplotlib

from llmlab import plots

matplotlib.use("Agg")


def test_expert_load_draws_each_methods_seed_mean_in_its_seed_band():
    fig = plots.expert_load({"bias": [[3.0, 1.0], [5.0, 2.0]], "none": [[3.0, 3.0], [3.0, 3.0]]})
    (ax,) = fig.axes
    bias, none, even = ax.lines
    assert list(bias.get_ydata()) == [4.0, 1.5]
    assert list(none.get_ydata()) == [3.0, 3.0]
    assert list(even.get_ydata()) == [1.0, 1.0]  # the line of perfect balance
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert min(band) == 1.0 and max(band) == 5.0  # from the lowest seed to the highest
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["bias", "none"]


def test_attention_work_draws_a_bar_per_rank_and_split():
    ax = plots.attention_work({"contiguous": [10, 26], "zigzag": [18, 18]}).axes[0]
    assert [p.get_height() for p in ax.patches] == [10, 26, 18, 18]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["rank 0", "rank 1"]
