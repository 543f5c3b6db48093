"""Lab 10's figures draw what they are given and return the Figure."""

from types import SimpleNamespace

import matplotlib
import pytest
from matplotlib.collections import PathCollection

from llmlab import plots
from llmlab.evaluate.seeds import seed_spread

matplotlib.use("Agg")


def test_method_scores_draws_every_seed_the_mean_and_the_starting_score():
    scores = {"SFT": [60.0, 62.0, 61.0], "GRPO": [70.0, 75.0, 73.0], "one run": [50.0]}
    (ax,) = plots.method_scores(scores, 61.5, "exact match (%)", "after SFT").axes
    drawn = [tuple(y for _, y in c.get_offsets()) for c in ax.collections
             if isinstance(c, PathCollection)]  # the dots, not the error bars
    assert drawn == [(60.0, 62.0, 61.0), (70.0, 75.0, 73.0), (50.0,)]
    ends = [y for line in ax.lines for y in line.get_ydata()]
    assert any(y == pytest.approx(seed_spread(scores["GRPO"]).high) for y in ends)
    assert any(list(line.get_ydata()) == [61.5, 61.5] for line in ax.lines)
    named = [text.get_text() for text in ax.get_legend().get_texts()]
    assert sorted(named) == ["after SFT", "mean, 95% interval", "one seed"]  # each once


def dpo_step(chosen_reward, rejected_reward, chosen_logprob, rejected_logprob):
    return SimpleNamespace(chosen_reward=chosen_reward, rejected_reward=rejected_reward,
                           chosen_logprob=chosen_logprob, rejected_logprob=rejected_logprob)


def test_dpo_training_draws_both_answers_rewards_and_log_probabilities_per_run():
    runs = {"DPO": [dpo_step(0.0, 0.0, -1.0, -6.0), dpo_step(-0.2, -1.0, -4.0, -16.0)],
            "DPO + SFT": [dpo_step(0.0, 0.0, -1.0, -6.0), dpo_step(0.1, -0.6, -0.5, -11.0)]}
    left, right = plots.dpo_training(runs).axes
    assert [list(line.get_ydata()) for line in right.lines] == [
        [-1.0, -4.0], [-6.0, -16.0], [-1.0, -0.5], [-6.0, -11.0]]
    assert [list(line.get_ydata()) for line in left.lines][:4] == [
        [0.0, -0.2], [0.0, -1.0], [0.0, 0.1], [0.0, -0.6]]
    assert [t.get_text() for t in left.get_legend().get_texts()] == [
        "DPO: chosen", "DPO: rejected", "DPO + SFT: chosen", "DPO + SFT: rejected"]


def test_grpo_training_draws_reward_kl_and_entropy_per_run():
    runs = {f"seed {s}": [SimpleNamespace(reward=0.5 + s, kl=0.01 * s, entropy=1.0 - s)] * 3
            for s in range(2)}
    reward, kl, entropy = plots.grpo_training(runs).axes
    assert [list(line.get_ydata()) for line in reward.lines] == [[0.5] * 3, [1.5] * 3]
    assert [list(line.get_ydata()) for line in kl.lines] == [[0.0] * 3, [0.01] * 3]
    assert [list(line.get_ydata()) for line in entropy.lines] == [[1.0] * 3, [0.0] * 3]
