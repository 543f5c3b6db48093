"""Profiles: explicit names win, then LLMLAB_PROFILE, then the hardware; bad names are errors."""

import pytest
import torch

from llmlab.course import profile


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
    with pytest.raises(ValueError, match="'smoke', 'full', 'auto'"):
        profile(request)


def test_pick_returns_the_value_for_the_profile():
    assert profile("smoke").pick(smoke=1, full=2) == 1
    assert profile("full").pick(smoke=1, full=2) == 2
