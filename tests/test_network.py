"""The network switch: offline by default, LLMLAB_ONLINE turns it on, a user's own Hugging Face
setting wins."""

import os

import pytest

from llmlab import network


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
