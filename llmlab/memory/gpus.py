"""Which common GPUs a training set-up fits on."""

import math

from llmlab.gpu_specs import GPU_SPECS
from llmlab.memory.estimate import GB, MemoryEstimate
from llmlab.tables import markdown_table

# The memory sizes training GPUs come in (GB, as marketed).
GPU_SIZES_GB = (16, 24, 40, 48, 80, 141)


def fits(estimate: MemoryEstimate, gpu_gb: float) -> str:
    """'yes', 'tight' (the last 10%, where allocator fragmentation can tip it over) or 'no'.

    GPU sizes are the marketed figures read as 10^9 bytes; the chips hold a little more, which
    roughly pays for what the driver reserves.
    """
    if gpu_gb <= 0 or math.isnan(gpu_gb):
        raise ValueError(f"GPU memory must be a positive number of GB, got {gpu_gb}")
    used = estimate.total / (gpu_gb * GB)
    return "yes" if used <= 0.9 else "tight" if used <= 1.0 else "no"


def gpus_with(memory_gb: float) -> list[str]:
    """Names of the GPUs in `llmlab.gpu_specs.GPU_SPECS` with this much memory."""
    return [spec.name for spec in GPU_SPECS if spec.memory_gb == memory_gb]


def fit_table(estimates: dict[str, MemoryEstimate], sizes=GPU_SIZES_GB) -> str:
    """One row per set-up, one column per GPU size: yes, tight or no (see `fits`)."""
    rows = [{"set-up": label, "GB/GPU": f"{estimate.total / GB:.1f}",
             **{f"{size} GB": fits(estimate, size) for size in sizes}}
            for label, estimate in estimates.items()]
    lines = [markdown_table(rows, aligned=True), ""]
    lines += [f"{size:>4} GB: {', '.join(gpus_with(size)) or '-'}" for size in sizes]
    return "\n".join(lines)
