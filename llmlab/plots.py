"""The figures the labs show (matplotlib). Each function returns the Figure it draws."""

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure


def matmul_throughput(
    results: Sequence, reference_peaks: Mapping[str, float] | None = None, title: str = ""
) -> Figure:
    """Achieved TFLOP/s against matrix size, one line per (device, dtype), log scales.

    `results` are `llmlab.bench.MatmulResult`s; `reference_peaks` ({"H100 SXM bf16": 989, ...})
    are drawn as dashed horizontal lines so a CPU figure can be seen beside a GPU's datasheet.
    """
    fig, ax = plt.subplots(figsize=(8, 4.5))
    series: dict[str, list] = {}
    for result in results:
        series.setdefault(f"{result.device} {result.dtype}", []).append(result)
    for label, points in series.items():
        points = sorted(points, key=lambda r: r.size)
        ax.plot([r.size for r in points], [r.tflops for r in points], marker="o", label=label)
    for index, (label, peak) in enumerate((reference_peaks or {}).items()):
        ax.axhline(peak, linestyle="--", linewidth=1, color=f"C{(index + len(series)) % 10}")
        ax.annotate(f"{label}: {peak:g}", (0.01, peak), xycoords=("axes fraction", "data"),
                    va="bottom", fontsize=8)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("matrix size n (n x n @ n x n)")
    ax.set_ylabel("TFLOP/s (log scale)")
    ax.set_title(title or "Matrix-multiply throughput")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
