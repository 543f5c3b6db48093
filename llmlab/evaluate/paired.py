"""How much worse is one model than another on the same held-out windows, and is it noise?

Both models score the same windows, so a window that is hard for one is hard for the other: the
per-window differences vary far less than either model's losses do. Their spread, not the spread
of the losses, says how much of a small perplexity gap the choice of windows alone could make.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from llmlab.evaluate.next_token import score_tokens


@dataclass(frozen=True)
class PairedRatio:
    ratio: float  # perplexity of the model / perplexity of the reference
    noise: float  # two standard errors of the per-window differences, as a relative change

    def __str__(self) -> str:
        return f"x{self.ratio:.3f} (noise ±{self.noise:.1%})"


def paired_perplexity_ratio(
    model: torch.nn.Module, reference: torch.nn.Module, windows: Sequence[torch.Tensor]
) -> PairedRatio:
    """The model's perplexity against the reference's on windows of one length, with the noise
    of that ratio over the windows (paired: each window compares the two models)."""
    if len(windows) < 2 or len({w.numel() for w in windows}) != 1:
        raise ValueError("need at least 2 windows, all of one length (each weighs the same)")
    differences = torch.tensor([
        score_tokens(model, [w]).loss - score_tokens(reference, [w]).loss for w in windows
    ], dtype=torch.float64)
    standard_error = differences.std().item() / math.sqrt(len(windows))
    return PairedRatio(math.exp(differences.mean().item()), math.exp(2 * standard_error) - 1)
