"""One rule for a GPU-only device or kernel asked for on a machine without one: warn and go on
with the CPU, so a notebook run on a laptop finishes (slower) instead of stopping."""

import warnings

import torch


def device_or_cpu(device: str | torch.device | None, library: str) -> torch.device:
    """The device asked for (the CPU when None), or the CPU with a warning that says so when it
    is a CUDA device and this machine has none."""
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and not torch.cuda.is_available():
        warnings.warn(
            f"{device} was asked for but this machine has no CUDA GPU: {library} runs on the CPU "
            "instead (the same numbers, more slowly)",
            stacklevel=3,
        )
        return torch.device("cpu")
    return device
