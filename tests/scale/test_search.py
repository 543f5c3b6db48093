"""Layout search, scaling curves, their plot, and `llmlab plan`."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from llmlab import cli, plots  # noqa: E402
from llmlab.scale.search import plan_table, scaling_curve, search_layouts  # noqa: E402
from llmlab.scale.simulate import Cluster  # noqa: E402

PLAN = ["plan", "--model", "llama-70b", "--gpu", "h100", "--gpus", "512", "--tokens", "2e12"]


def test_search_returns_fitting_layouts_cheapest_first():
    found = search_layouts("llama-70b", Cluster("h100", 8, 8), tokens=1e12)
    assert found
    assert all(p.fit != "no" and p.parallel.gpus == 64 for p in found)
    comfortable = [p for p in found if p.fit == "yes"]
    assert [p.cost for p in comfortable] == sorted(p.cost for p in comfortable)
    assert found[0].parallel.tp > 1 or found[0].parallel.zero  # 70B never fits plain DP
    # The global batch is kept (to the nearest micro-batch per replica): about 4M tokens.
    assert all(abs(p.tokens_per_step - 4e6) / 4e6 < 0.1 for p in found)


def test_nothing_fits_says_what_to_do():
    assert search_layouts("llama-70b", Cluster("h100", 8, 1), tokens=1e12) == []
    assert "nothing fits" in plan_table([])


@pytest.mark.parametrize("mode", ["weak", "strong"])
def test_scaling_curves(mode):
    rows = scaling_curve("llama-7b", (8, 64, 512), mode=mode, batch_tokens=4e6)
    assert [row["gpus"] for row in rows] == [8, 64, 512]
    rates = [row["tokens_per_s"] for row in rows]
    assert rates == sorted(rates)  # more GPUs, more tokens per second
    batches = [row["batch_tokens"] for row in rows]
    if mode == "weak":  # tokens per GPU per step fixed, so the batch grows with the GPUs
        assert batches[-1] > 10 * batches[0]
    else:
        assert max(batches) / min(batches) < 1.1
    fig = plots.scaling_curves({f"llama-7b, {mode}": rows}, {"Llama 3 405B": (16384, 0.41)})
    assert len(fig.axes) == 2


def test_scaling_curve_refuses_partial_nodes():
    with pytest.raises(ValueError, match="whole nodes"):
        scaling_curve("llama-7b", (12,))


def test_cli_plan_prints_the_best_layouts(capsys):
    assert cli.main([*PLAN, "--limit", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "512 x h100" in lines[0]
    assert "MFU" in lines[1] and "cost $" in lines[1]
    assert [line.split()[0] for line in lines[3:]] == ["1", "2", "3"]  # after the | --- | rule


@pytest.mark.parametrize("change, message", [
    (["--gpus", "500"], "whole nodes"), (["--gpu", "z80"], "unknown GPU"),
    (["--model", "llama-9000"], "unknown model preset"), (["--tokens", "0"], "positive"),
    (["--tokens", "inf"], "argument --tokens: must be a positive finite number, got 'inf'"),
    (["--tokens", "1e400"], "argument --tokens: must be a positive finite number"),
    (["--batch-tokens", "nan"], "argument --batch-tokens: must be a positive finite number"),
    (["--seq", "-5"], "argument --seq: must be 0 or a positive integer, got '-5'"),
    (["--seq", "8192"], "longer than the model's context 4096"),
    (["--gpus", "0"], "argument --gpus: must be a number of GPUs from 1 to 1048576, got '0'"),
    (["--gpus", "2000000"], "argument --gpus: must be a number of GPUs from 1 to 1048576"),
    (["--gpus-per-node", "-8"], "argument --gpus-per-node: must be a positive integer"),
    (["--efficiency", "0"], "argument --efficiency: must be a share of the peak"),
    (["--efficiency", "nan"], "argument --efficiency: must be a share of the peak"),
    (["--price", "-1"], "argument --price: must be a finite number >= 0, got '-1'"),
    (["--price", "inf"], "argument --price: must be a finite number >= 0"),
    (["--limit", "0"], "argument --limit: must be a positive integer"),
    # Not "more GPUs": 977 sequences cannot feed the thousands of replicas of a million GPUs.
    (["--gpus", "1000000"], "a batch of 977 sequences is too small for 1000000 GPUs"),
])
def test_cli_plan_bad_input(change, message, capsys):
    argv = [*PLAN, *change] if change[0] not in PLAN else PLAN.copy()
    argv[argv.index(change[0]) + 1] = change[1]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # one line, after the usage
    assert error.startswith("llmlab plan: error:") and message in error


def test_strong_scaling_to_16k_gpus_loses_efficiency():
    # A fixed 16M-token batch over 16,384 GPUs leaves each replica few micro-batches: the
    # pipeline bubble grows and MFU falls, while tokens/s still rise.
    rows = scaling_curve("llama-70b", (512, 16384), mode="strong", batch_tokens=16e6)
    small, large = rows
    assert large["gpus"] == 16384
    assert large["mfu"] < small["mfu"]
    assert large["tokens_per_s"] > small["tokens_per_s"]


def test_plan_prints_expert_parallel_layouts_for_a_mixture_of_experts(capsys):
    assert cli.main(["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--tokens", "1e12",
                     "--seq", "4096", "--limit", "8"]) == 0
    out = capsys.readouterr().out
    assert "| EP s |" in out and "(EP 8)" in out


def test_a_dense_plan_has_no_ep_column(capsys):
    assert cli.main(PLAN) == 0
    assert "EP s" not in capsys.readouterr().out
