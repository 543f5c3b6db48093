"""Profiles: one switch that sets the scale of every lab.

`smoke` runs in minutes on a laptop-class CPU (what CI and Binder run); `full` uses real sizes on a
GPU. `auto` picks `full` when a CUDA device is present, else `smoke`; the environment variable
LLMLAB_PROFILE overrides `auto` (the headless course runner sets it).
"""

import os
from dataclasses import dataclass
from typing import TypeVar

import torch

PROFILES = ("smoke", "full")
ENV_VARIABLE = "LLMLAB_PROFILE"

T = TypeVar("T")


@dataclass(frozen=True)
class Profile:
    name: str
    reason: str

    def pick(self, *, smoke: T, full: T) -> T:
        """The value for this profile: `sizes = P.pick(smoke=[256, 512], full=[4096, 8192])`."""
        return smoke if self.name == "smoke" else full

    def __str__(self) -> str:
        return f"profile {self.name!r} ({self.reason})"


def _named(name: str, reason: str) -> Profile:
    if name not in PROFILES:
        valid = ", ".join(repr(p) for p in (*PROFILES, "auto"))
        raise ValueError(f"unknown profile {name!r} ({reason}); valid profiles are {valid}")
    return Profile(name, reason)


def profile(requested: str = "auto") -> Profile:
    """The active profile: `requested` when it names one, else LLMLAB_PROFILE, else by hardware."""
    requested = requested.strip().lower()
    if requested != "auto":
        return _named(requested, "asked for explicitly")
    from_env = os.environ.get(ENV_VARIABLE, "").strip().lower()
    if from_env and from_env != "auto":
        return _named(from_env, f"set by {ENV_VARIABLE}")
    if torch.cuda.is_available():
        return Profile("full", "a CUDA GPU is present")
    return Profile("smoke", "no CUDA GPU: small sizes that run in minutes on a CPU")
