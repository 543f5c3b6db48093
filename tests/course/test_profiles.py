"""Profiles: explicit names win, then LLMLAB_PROFILE, then the hardware (for a lab, its rule, the
same one `llmlab doctor` prints); bad names are errors."""

import json

import pytest
import torch
from helpers.fake_machines import (
    A100_40GB,
    A100_80GB,
    H100,
    L4,
    RTX_3060,
    RTX_4060,
    T4,
    cuda_box,
    gpus,
    h100_box,
    make_report,
)

from llmlab import cli, env
from llmlab.course import profile
from llmlab.course.labs import LABS


def test_explicit_profile_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("LLMLAB_PROFILE", "full")
    assert profile("smoke").name == "smoke"


def test_environment_overrides_auto(monkeypatch):
    monkeypatch.setenv("LLMLAB_PROFILE", "full")
    chosen = profile("auto")
    assert chosen.name == "full"
    assert "LLMLAB_PROFILE" in chosen.reason


def test_auto_follows_the_hardware(monkeypatch):
    monkeypatch.delenv("LLMLAB_PROFILE", raising=False)
    assert profile().name == ("full" if torch.cuda.is_available() else "smoke")


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_unknown_profile_names_the_valid_ones(monkeypatch, where):
    if where == "environment":
        monkeypatch.setenv("LLMLAB_PROFILE", "huge")
        request = "auto"
    else:
        request = "huge"
    with pytest.raises(ValueError, match="'smoke', 'consumer', 'full', 'auto'"):
        profile(request)


def test_pick_returns_the_value_for_the_profile():
    assert profile("smoke").pick(smoke=1, full=2) == 1
    assert profile("full").pick(smoke=1, full=2) == 2
    assert profile("full").pick(smoke=1, full=2, consumer=3) == 2


def test_consumer_picks_its_own_value_when_given_and_the_full_one_otherwise(monkeypatch):
    monkeypatch.setenv("LLMLAB_PROFILE", "consumer")  # named everywhere a profile can be
    consumer = profile("auto")
    assert consumer.name == "consumer"
    assert consumer.pick(smoke=1, full=2, consumer=3) == 3
    assert consumer.pick(smoke=1, full=2) == 2  # the labs' existing picks: GPT-2 small's sizes
    assert consumer.pick(smoke=[1], full=[2], consumer=[]) == []  # a falsy value is a value


MACHINES = {
    "cpu": make_report(),
    "RTX-4060": cuda_box(gpus=gpus(RTX_4060)),
    "RTX-3060": cuda_box(gpus=gpus(RTX_3060)),
    "T4": cuda_box(gpus=gpus(T4)),
    "L4": cuda_box(gpus=gpus(L4)),
    "A100-40GB": cuda_box(gpus=gpus(A100_40GB)),
    "A100-80GB": cuda_box(gpus=gpus(A100_80GB)),
    "H100": cuda_box(gpus=gpus(H100)),
    "8xH100": h100_box(),
}


@pytest.fixture
def machine(monkeypatch):
    """Make profile() and `llmlab doctor` see one fake machine, with LLMLAB_PROFILE unset."""
    monkeypatch.delenv("LLMLAB_PROFILE", raising=False)

    def use(report):
        monkeypatch.setattr(env, "visible_gpus", lambda: list(report.gpus))
        monkeypatch.setattr(env, "collect", lambda include_frameworks=True: report)

    return use


@pytest.mark.parametrize("name", MACHINES)
def test_auto_for_a_lab_gives_the_doctors_answer(machine, capsys, name):
    machine(MACHINES[name])
    cli.main(["doctor", "--json"])
    doctor = {lab["lab"]: lab["profile"] for lab in json.loads(capsys.readouterr().out)["labs"]}
    chosen = {lab.notebook: profile("auto", lab=lab.number).name for lab in LABS}
    assert chosen == doctor


@pytest.mark.parametrize(
    ("name", "lab_03"),
    [("cpu", "smoke"), ("RTX-4060", "smoke"), ("RTX-3060", "consumer"), ("T4", "consumer"),
     ("L4", "full"), ("A100-40GB", "full"), ("A100-80GB", "full"), ("H100", "full")],
)
def test_lab_03_trains_gpt2_small_where_it_fits(machine, name, lab_03):
    machine(MACHINES[name])
    chosen = profile("auto", lab=3)
    assert chosen.name == lab_03
    assert chosen.reason.startswith("Lab 03: ")


def test_the_environment_variable_overrides_a_labs_rule(machine, monkeypatch):
    machine(MACHINES["H100"])
    monkeypatch.setenv("LLMLAB_PROFILE", "smoke")
    assert profile("auto", lab=3).name == "smoke"
    assert profile("full", lab=3).name == "full"


def test_auto_for_a_lab_runs_no_slow_probe(machine, monkeypatch):
    machine(MACHINES["L4"])

    def slow_probe(*args, **kwargs):
        raise AssertionError("profile() must not run the doctor's probes")

    monkeypatch.setattr(env, "collect", slow_probe)
    monkeypatch.setattr(env, "nvidia_smi", slow_probe)
    assert profile("auto", lab=3).name == "full"


def test_an_unknown_lab_is_an_error():
    with pytest.raises(ValueError, match="no lab 42"):
        profile("auto", lab=42)
