"""Small course tools: headline recording, loading a notebook's functions, the network switch,
and the matmul plot."""

import json
import os

import matplotlib
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from llmlab import network, plots
from llmlab.bench import MatmulResult
from llmlab.course import headline
from llmlab.course.notebook_code import load_definitions

matplotlib.use("Agg")


def test_headline_prints_and_records_when_the_runner_asks(tmp_path, monkeypatch, capsys):
    target = tmp_path / "headline.json"
    monkeypatch.setenv("LLMLAB_HEADLINE_FILE", str(target))
    headline("42 TFLOP/s")
    assert capsys.readouterr().out == "Headline: 42 TFLOP/s\n"
    assert json.loads(target.read_text()) == {"headline": "42 TFLOP/s"}


def test_load_definitions_runs_imports_and_defs_but_not_other_statements(tmp_path):
    path = tmp_path / "nb.ipynb"
    cells = [
        "%matplotlib inline\nimport math",
        "def circle(r):\n    return math.pi * r * r",
        "raise RuntimeError('top-level code must not run')",
    ]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), path)
    namespace = load_definitions(path, ["circle"])
    assert namespace["circle"](1.0) == pytest.approx(3.14159, rel=1e-5)
    with pytest.raises(LookupError, match="square"):
        load_definitions(path, ["square"])


@pytest.mark.parametrize("value, expected", [("1", True), ("yes", True), ("0", False), ("", False)])
def test_online_switch(monkeypatch, value, expected):
    monkeypatch.setenv("LLMLAB_ONLINE", value)
    assert network.online() is expected


def test_offline_by_default_but_a_users_own_setting_wins(monkeypatch):
    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    network.apply_network_policy()
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    network.apply_network_policy()
    assert os.environ["HF_HUB_OFFLINE"] == "0"


def test_matmul_plot_draws_one_line_per_device_dtype_and_one_per_reference():
    results = [
        MatmulResult(size, dtype, "cpu", 1.0, tflops)
        for size, dtype, tflops in [(128, "fp32", 0.1), (256, "fp32", 0.2), (128, "bf16", 0.3)]
    ]
    fig = plots.matmul_throughput(results, {"H100 SXM bf16 peak": 989})
    ax = fig.axes[0]
    assert len(ax.lines) == 3  # cpu fp32, cpu bf16, the dashed peak
    assert ax.get_yscale() == "log"


def test_artifacts_go_to_the_variable_then_the_checkout_then_the_home_cache(tmp_path, monkeypatch):
    from llmlab.course import artifacts_dir

    monkeypatch.setenv("LLMLAB_ARTIFACTS", str(tmp_path / "mine"))
    assert artifacts_dir() == tmp_path / "mine" and (tmp_path / "mine").is_dir()
    monkeypatch.delenv("LLMLAB_ARTIFACTS")
    checkout = tmp_path / "course"
    for folder in ("llmlab", "solutions", "labs"):
        (checkout / folder).mkdir(parents=True)
    monkeypatch.chdir(checkout / "labs")
    assert artifacts_dir(create=False) == checkout / "artifacts"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert artifacts_dir(create=False) == tmp_path / "home" / ".cache" / "llmlab" / "artifacts"
