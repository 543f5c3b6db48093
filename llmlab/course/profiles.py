"""Profiles: one switch that sets the scale of every lab.

`smoke` runs in minutes on a laptop-class CPU (what CI and Binder run); `full` uses real sizes on a
GPU; `consumer` is `full` (GPT-2 small, its data and sizes) fitted to a 12-20 GB GPU (a free Colab
T4, an RTX 3060 or 4080): Lab 03 splits the same 16 sequences per step into smaller micro-batches,
and a lab whose full size does not fit such a GPU gives its own with `pick(consumer=...)`.
The environment variable LLMLAB_PROFILE overrides `auto` (the headless course runner sets it).
Otherwise `profile("auto", lab=N)` follows lab N's rule on this machine, the answer `llmlab doctor`
prints; without a lab, `auto` picks `full` when a CUDA device is present, else `smoke`.
"""

import os
from dataclasses import dataclass
from typing import TypeVar

from llmlab import env
from llmlab.course.labs import find_lab

PROFILES = ("smoke", "consumer", "full")
ENV_VARIABLE = "LLMLAB_PROFILE"

T = TypeVar("T")


@dataclass(frozen=True)
class Profile:
    name: str
    reason: str

    def pick(self, *, smoke: T, full: T, consumer: T | None = None) -> T:
        """The value for this profile: `sizes = P.pick(smoke=[256, 512], full=[4096, 8192])`.
        `consumer` is given only where the full value does not fit a 12-20 GB GPU; left out
        (None), the consumer profile takes the full value."""
        if self.name == "smoke":
            return smoke
        if self.name == "consumer" and consumer is not None:
            return consumer
        return full

    def __str__(self) -> str:
        return f"profile {self.name!r} ({self.reason})"


def _named(name: str, reason: str) -> Profile:
    if name not in PROFILES:
        valid = ", ".join(repr(p) for p in (*PROFILES, "auto"))
        raise ValueError(f"unknown profile {name!r} ({reason}); valid profiles are {valid}")
    return Profile(name, reason)


def explicit_profile(requested: str = "auto") -> Profile | None:
    """The profile a person named: `requested`, else LLMLAB_PROFILE; None when both say auto."""
    requested = requested.strip().lower()
    if requested != "auto":
        return _named(requested, "asked for explicitly")
    from_env = os.environ.get(ENV_VARIABLE, "").strip().lower()
    if from_env and from_env != "auto":
        return _named(from_env, f"set by {ENV_VARIABLE}")
    return None


def profile(requested: str = "auto", lab: int | None = None) -> Profile:
    """The active profile: `requested` when it names one, else LLMLAB_PROFILE, else this machine's:
    with `lab`, that lab's rule (as `llmlab doctor` prints it), without, a CUDA GPU or not."""
    named = explicit_profile(requested)
    if named is not None:
        return named
    if lab is not None:
        # Only torch's device query: no slow probes when a notebook starts.
        name, why = find_lab(lab).profile_on(env.visible_gpus())
        return Profile(name, f"Lab {lab:02d}: {why}")
    import torch  # here: the CLI imports this module for its help, which must not wait for torch

    if torch.cuda.is_available():
        return Profile("full", "a CUDA GPU is present")
    return Profile("smoke", "no CUDA GPU: small sizes that run in minutes on a CPU")
