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


def test_live_loss_redraws_every_so_many_steps_and_at_each_validation_point(monkeypatch):
    from types import SimpleNamespace

    live = plots.LiveLoss(every=25)
    drawn = []
    monkeypatch.setattr(live, "_show", lambda: drawn.append(live.steps[-1]))
    for step in range(1, 71):  # validation at step 30 and at the last step, 70
        live(SimpleNamespace(step=step, loss=5.0 - step / 100,
                             val_loss=4.0 if step in (30, 70) else None))
    assert drawn == [25, 30, 50, 70]  # the last step is drawn though 70 is not a multiple of 25
    ax = live.figure().axes[0]
    assert list(ax.lines[1].get_xdata()) == [30, 70]  # the validation points
