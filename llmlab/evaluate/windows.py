"""Fixed held-out windows: the same tokens for every model variant, so their scores compare."""

from collections.abc import Sequence

import numpy as np
import torch


def held_out_windows(
    ids: Sequence[int] | np.ndarray | torch.Tensor, seq_len: int, max_windows: int | None = None
) -> list[torch.Tensor]:
    """Cut a token stream into consecutive windows of seq_len + 1 tokens (seq_len predictions
    each); a shorter last window keeps the tail, so no held-out token is left out.

    Consecutive, not random: random windows (as training draws them) would give every variant
    different tokens, and a perplexity difference could then be the sample's, not the model's.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be at least 1, got {seq_len}")
    if max_windows is not None and max_windows < 1:
        raise ValueError(f"max_windows must be at least 1 (or None for all), got {max_windows}")
    stream = torch.as_tensor(np.asarray(ids), dtype=torch.long).flatten()
    if stream.numel() < 2:
        raise ValueError(
            f"need at least 2 held-out tokens (one to read, one to predict), got {stream.numel()}"
        )
    # Windows overlap by one token: a window's last target is the next window's first input.
    starts = range(0, stream.numel() - 1, seq_len)
    windows = [stream[start : start + seq_len + 1] for start in starts]
    return windows[:max_windows]
