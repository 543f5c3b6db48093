"""A lab's headline figure: printed for the learner, recorded for the headless course table."""

import json
import os
from pathlib import Path

HEADLINE_VARIABLE = "LLMLAB_HEADLINE_FILE"


def headline(text: str) -> None:
    """Print the lab's one-line result; the course runner (which sets the variable) collects it."""
    print(f"Headline: {text}")
    target = os.environ.get(HEADLINE_VARIABLE)
    if target:
        Path(target).write_text(json.dumps({"headline": text}), encoding="utf-8")
