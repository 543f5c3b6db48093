"""The one switch that lets the course reach the network (off by default).

Everything in the course runs offline: it builds its own models and tokenizers and uses a corpus
that is on every machine. Hub datasets and models (wikitext, TinyStories, gpt2) are used only when
the user sets LLMLAB_ONLINE=1.
"""

import os

ONLINE_VARIABLE = "LLMLAB_ONLINE"


def online() -> bool:
    """True when the user has asked the course to use the network."""
    return os.environ.get(ONLINE_VARIABLE, "0").strip().lower() in {"1", "true", "yes"}


def apply_network_policy() -> None:
    """Put the Hugging Face libraries offline unless the user opted in (a user's own value wins)."""
    if not online():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
