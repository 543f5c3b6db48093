"""Lab 09's inference figure draws what it is given and returns the Figure."""

import matplotlib

from llmlab import plots

matplotlib.use("Agg")


def test_generation_step_times_draws_milliseconds_from_the_prompts_length():
    (ax,) = plots.generation_step_times({"recompute": [0.01, 0.02, 0.03],
                                         "KV cache": [0.01, 0.001, 0.001]}, 16).axes  # fmt: skip
    first, second = ax.lines
    assert list(first.get_xdata()) == [16, 17, 18]
    assert list(first.get_ydata()) == [10.0, 20.0, 30.0]
    assert list(second.get_ydata()) == [10.0, 1.0, 1.0]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["recompute", "KV cache"]
