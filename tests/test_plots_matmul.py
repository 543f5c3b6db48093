"""Lab 00's matmul figure: one line per device and dtype, and one per reference."""

import matplotlib

from llmlab import plots
from llmlab.matmul import MatmulResult

matplotlib.use("Agg")


def test_matmul_plot_draws_one_line_per_device_dtype_and_one_per_reference():
    results = [
        MatmulResult(size, dtype, "cpu", 1.0, tflops)
        for size, dtype, tflops in [(128, "fp32", 0.1), (256, "fp32", 0.2), (128, "bf16", 0.3)]
    ]
    fig = plots.matmul_throughput(results, {"H100 SXM bf16 peak": 989})
    ax = fig.axes[0]
    assert len(ax.lines) == 3  # cpu fp32, cpu bf16, the dashed peak
    assert ax.get_yscale() == "log"
