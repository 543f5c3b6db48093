"""The figures the labs show (matplotlib). Each function returns the Figure it draws."""

import statistics
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from llmlab.evaluate.seeds import seed_spread
from llmlab.scale.schedules import bubble


def _finish(fig: Figure, ax, xlabel: str, ylabel: str, title: str) -> Figure:
    """Label a one-axes line figure, grid and legend it, and fit its layout."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def matmul_throughput(
    results: Sequence, reference_peaks: Mapping[str, float] | None = None, title: str = ""
) -> Figure:
    """Achieved TFLOP/s against matrix size, one line per (device, dtype), log scales.

    `results` are `llmlab.matmul.MatmulResult`s; `reference_peaks` ({"H100 SXM bf16": 989, ...})
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
                    va="bottom", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("matrix size n (n x n @ n x n)")
    ax.set_ylabel("TFLOP/s (log scale)")
    ax.set_title(title or "Matrix-multiply throughput")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def document_lengths(
    lengths: Mapping[str, Sequence[int]], unit: str = "characters", title: str = ""
) -> Figure:
    """Histogram of document lengths on a log scale, one series per source ({"code": [...]})."""
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 4))
    everything = [n for values in lengths.values() for n in values if n > 0]
    bins = np.logspace(np.log10(min(everything)), np.log10(max(everything)), 40)
    for index, (label, values) in enumerate(lengths.items()):
        values = [n for n in values if n > 0]
        ax.hist(values, bins=bins, alpha=0.6, label=f"{label} ({len(values)} documents)")
        ax.axvline(float(np.median(values)), color=f"C{index}", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel(f"document length ({unit}, log scale); dashed: median")
    ax.set_ylabel("documents")
    ax.set_title(title or "Document lengths")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def tokens_per_word(rates: Mapping[str, Mapping[str, float]], title: str = "") -> Figure:
    """Grouped bars: units per whitespace word for each granularity ({"BPE": {"code": 2.1}})."""
    fig, ax = plt.subplots(figsize=(8, 4))
    granularities = list(rates)
    groups = sorted({group for per_group in rates.values() for group in per_group})
    width = 0.8 / max(len(groups), 1)
    for index, group in enumerate(groups):
        xs = [g + (index - (len(groups) - 1) / 2) * width for g in range(len(granularities))]
        values = [rates[name].get(group, 0.0) for name in granularities]
        bars = ax.bar(xs, values, width, label=group)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(granularities)), granularities)
    ax.set_ylabel("units per word; dashed: 1 (a word-level vocabulary)")
    ax.set_title(title or "How many units a word becomes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def padding_waste(costs: Sequence, title: str = "") -> Figure:
    """Padding share and truncated share against sequence length, one line per strategy.

    `costs` are `llmlab.data.packing.BatchingCost`s.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    strategies: dict[str, list] = {}
    for cost in costs:
        strategies.setdefault(cost.strategy, []).append(cost)
    for label, points in strategies.items():
        points = sorted(points, key=lambda c: c.seq_len)
        lengths = [c.seq_len for c in points]
        left.plot(lengths, [100 * c.padding_fraction for c in points], marker="o", label=label)
        right.plot(lengths, [100 * c.truncated_fraction for c in points], marker="o", label=label)
    for ax, what in ((left, "compute spent on padding (%)"), (right, "tokens cut off (%)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    fig.suptitle(title or "Fixed-length rows: padding versus packing")
    fig.tight_layout()
    return fig


def pipeline_throughput(stage_mb_per_s: Mapping[str, float], title: str = "") -> Figure:
    """Horizontal bars: MB/s of each pipeline stage (the slowest bounds the whole pipeline)."""
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(stage_mb_per_s) + 1.2))
    names = list(stage_mb_per_s)
    bars = ax.barh(names, [stage_mb_per_s[n] for n in names], color="C0")
    ax.bar_label(bars, fmt="%.1f MB/s", fontsize=8, padding=3)
    ax.invert_yaxis()  # first stage on top
    ax.set_xscale("log")
    ax.set_xlabel("MB of input text per second (log scale)")
    ax.set_title(title or "Throughput of each pipeline stage")
    fig.tight_layout()
    return fig


def memory_breakdown(
    breakdowns: Mapping[str, Mapping[str, float]],
    gpu_sizes_gb: Sequence[float] = (16, 24, 40, 80),
    title: str = "",
) -> Figure:
    """Stacked bars of bytes per item, one bar per set-up ({"7B bf16": {"weights": 13.5e9}}),
    with dashed lines at common GPU sizes. Each bar should hold the items present at the peak;
    items stack in the order they first appear."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = list(breakdowns)
    items = [item for item in dict.fromkeys(i for parts in breakdowns.values() for i in parts)
             if any(parts.get(item) for parts in breakdowns.values())]
    bottoms = [0.0] * len(labels)
    for index, item in enumerate(items):
        heights = [breakdowns[label].get(item, 0.0) / 1e9 for label in labels]
        ax.bar(labels, heights, bottom=bottoms, label=item, color=f"C{index % 10}")
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    shown = [size for size in gpu_sizes_gb if size <= 1.15 * max(bottoms)]
    ax.set_ylim(top=1.08 * max([*bottoms, *shown]))  # room for the labels under the title
    for size in shown:
        ax.axhline(size, color="gray", linestyle="--", linewidth=1)
        ax.annotate(f"{size:g} GB", (1.0, size), xycoords=("axes fraction", "data"),
                    ha="right", va="bottom", fontsize=8)
    ax.set_ylabel("GB per GPU at the peak")
    ax.set_title(title or "Where the memory of a training step goes")
    ax.tick_params(axis="x", labelsize=8, labelrotation=15)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def sequence_timing(seconds: Mapping[str, Mapping[int, float]], title: str = "") -> Figure:
    """Milliseconds per forward pass against sequence length, one line per model."""
    return _log_log_lines(seconds, 1e3, "sequence length (tokens)",
                          "ms per forward pass (log scale)",
                          title or "Forward time against sequence length")


def _log_log_lines(series: Mapping[str, Mapping[int, float]], scale: float, xlabel: str,
                   ylabel: str, title: str) -> Figure:
    """One line per label through its {x: y} points (y times `scale`), on log scales."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, points in series.items():
        xs = sorted(points)
        ax.plot(xs, [scale * points[x] for x in xs], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


class LiveLoss:
    """A trainer callback that redraws the loss curve in the notebook as training goes: every
    `every` logged steps and at each validation point (the last step has one, so the figure left
    in the notebook is the whole run). A redraw costs about 0.1 s.

    `Trainer(..., callbacks=[LiveLoss()])`; outside a notebook it draws nothing until `figure()`.
    """

    def __init__(self, every: int = 1, title: str = "Training loss"):
        self.every, self.title = every, title
        self.steps, self.losses, self.val_steps, self.val_losses = [], [], [], []
        self.calls, self.handle = 0, None

    def __call__(self, metrics) -> None:
        self.steps.append(metrics.step)
        self.losses.append(metrics.loss)
        if metrics.val_loss is not None:
            self.val_steps.append(metrics.step)
            self.val_losses.append(metrics.val_loss)
        self.calls += 1
        if self.calls % self.every == 0 or metrics.val_loss is not None:
            self._show()

    def figure(self) -> Figure:
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot(self.steps, self.losses, label="train (each step's batch)")
        if self.val_steps:
            ax.plot(self.val_steps, self.val_losses, marker="o", label="validation")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("cross-entropy loss (nats per token)")
        ax.set_title(self.title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    def _show(self) -> None:
        try:
            from IPython.display import display
        except ImportError:  # not in IPython: nothing to redraw
            return
        fig = self.figure()
        if self.handle is None:
            self.handle = display(fig, display_id=True)
        else:
            self.handle.update(fig)
        plt.close(fig)  # the display keeps the rendered image; free the figure


def learning_rate_schedules(curves: Mapping[str, Sequence[float]], title: str = "") -> Figure:
    """Learning rate against step for each schedule ({"cosine": [...], ...})."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for label, values in curves.items():
        ax.plot(range(len(values)), values, label=label)
    return _finish(fig, ax, "optimizer step", "learning rate", title or "Learning-rate schedules")


def singular_values(spectra: Mapping[str, Sequence[float]], title: str = "") -> Figure:
    """Each matrix's singular values, largest first ({"gradient": [...], ...}), on a log scale:
    how lopsided a matrix is, and how much an orthogonalisation evens it out."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for label, values in spectra.items():
        ax.plot(range(1, len(values) + 1), sorted(values, reverse=True), label=label)
    ax.set_yscale("log")
    return _finish(fig, ax, "singular value, largest first", "size", title or "Singular values")


def _running_mean(values: list[float], window: int) -> list[float]:
    """Mean of each value and the window - 1 before it (fewer at the start)."""
    means = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        means.append(sum(chunk) / len(chunk))
    return means


def loss_curves(curves: Mapping[str, Sequence[float]], title: str = "", smooth: int = 1) -> Figure:
    """Training loss against step for several runs; `smooth` > 1 averages over that window."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, losses in curves.items():
        values = _running_mean(list(losses), smooth)
        ax.plot(range(1, len(values) + 1), values, label=label)
    ylabel = "training loss" + (f" (mean of {smooth} steps)" if smooth > 1 else "")
    return _finish(fig, ax, "optimizer step", ylabel, title or "Loss curves")


def throughput_bars(values: Mapping[str, float], unit: str = "tokens/s", title: str = "") -> Figure:
    """Horizontal bars of one measured rate per setting."""
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(values) + 1.5))
    bars = ax.barh(list(values), list(values.values()))
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title or f"Measured {unit}")
    fig.tight_layout()
    return fig


def all_reduce_traffic(
    curves: Mapping[str, Mapping[int, float]],
    measured: Mapping[int, Sequence[float]] | None = None,
    title: str = "",
) -> Figure:
    """What one rank sends per all-reduce, in sizes of the tensor, against the number of ranks:
    one line per algorithm ({ranks: sent}), and each rank's measured share as points."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for label, points in curves.items():
        ranks = sorted(points)
        ax.plot(ranks, [points[n] for n in ranks], "-", label=label)
    for n, shares in (measured or {}).items():
        ax.plot([n] * len(shares), shares, "ko", fillstyle="none")
    if measured:
        ax.plot([], [], "ko", fillstyle="none", label="measured, every rank")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("ranks (N)")
    ax.set_ylabel("sent per rank (x the tensor)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Bytes each rank sends per all-reduce")
    fig.tight_layout()
    return fig


def bubble_sweep(rows: Sequence[Mapping], title: str = "") -> Figure:
    """Measured idle share of each pipeline stage against the formula, per micro-batch count
    (rows as `llmlab.distributed.harness.pipeline.bubble_sweep` returns them)."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    counts = [row["microbatches"] for row in rows]
    for stage in range(len(rows[0]["idle"])):
        idle = [row["idle"][stage] for row in rows]
        ax.plot(counts, idle, "o-", label=f"stage {stage}, measured")
    ax.plot(counts, [row["formula"] for row in rows], "k--", label="(p-1)/(m+p-1)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(m) for m in counts])
    ax.set_xlabel("micro-batches per step (m)")
    ax.set_ylabel("idle share of the step")
    ax.set_ylim(0, None)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Pipeline bubble against micro-batches")
    fig.tight_layout()
    return fig


def pipeline_schedules(time_lines: Mapping[str, Sequence], title: str = "") -> Figure:
    """One panel per schedule ({name: llmlab.scale.schedules time line}): a row per stage, a box
    per piece of work, coloured by kind (forward, backward, weight gradient) and labelled with
    its micro-batch (and chunk, when a stage has several); the idle share in each title."""
    colours = {"F": "C0", "B": "C1", "W": "C2"}
    length = max(float(slot.end) for slots in time_lines.values() for slot in slots)
    fig, axes = plt.subplots(len(time_lines), 1, figsize=(11, 1.3 + 1.1 * len(time_lines)),
                             sharex=True, squeeze=False)
    for ax, (name, slots) in zip((row[0] for row in axes), time_lines.items(), strict=True):
        stages = 1 + max(slot.stage for slot in slots)
        chunked = any(slot.piece.chunk for slot in slots)
        for slot in slots:
            start, width = float(slot.start), float(slot.end - slot.start)
            ax.broken_barh([(start, width)], (slot.stage - 0.4, 0.8),
                           color=colours[slot.piece.kind], edgecolor="white", linewidth=0.5)
            label = f"{slot.piece.micro_batch}" + (f".{slot.piece.chunk}" if chunked else "")
            ax.text(start + width / 2, slot.stage, label, ha="center", va="center",
                    fontsize=6 if chunked else 7, color="white")
        ax.set_yticks(range(stages), [f"stage {s}" for s in range(stages)], fontsize=8)
        ax.invert_yaxis()  # stage 0 on top
        ax.set_xlim(0, length)
        ax.set_title(f"{name}: idle {float(bubble(slots)):.0%} of the step", fontsize=9,
                     loc="left")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in colours.values()]
    fig.legend(handles, ["forward", "backward (with W unless split)", "weight gradient (W)"],
               loc="upper right", fontsize=8, ncols=3)
    axes[-1][0].set_xlabel("time, in forwards of one micro-batch through one stage")
    fig.suptitle(title or "Pipeline schedules", x=0.01, ha="left")
    fig.tight_layout()
    return fig


def scaling_curves(
    curves: Mapping[str, Sequence[Mapping]],
    published: Mapping[str, tuple[int, float]] | None = None,
    title: str = "",
) -> Figure:
    """Predicted MFU and tokens/s against GPUs, one line per curve (rows as
    `llmlab.scale.search.scaling_curve` returns them); `published` adds points
    {label: (gpus, MFU)} reported by real runs."""
    fig, (ax_mfu, ax_rate) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, rows in curves.items():
        gpus = [row["gpus"] for row in rows]
        ax_mfu.plot(gpus, [row["mfu"] for row in rows], "o-", label=label)
        ax_rate.plot(gpus, [row["tokens_per_s"] for row in rows], "o-", label=label)
    for label, (gpus, mfu) in (published or {}).items():
        ax_mfu.plot([gpus], [mfu], "k*", markersize=12, label=f"{label} (reported)")
    for ax in (ax_mfu, ax_rate):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.grid(True, alpha=0.3)
    ax_rate.set_yscale("log")
    ax_mfu.set_ylim(0, 1)
    ax_mfu.set_ylabel("MFU")
    ax_rate.set_ylabel("tokens/s")
    ax_mfu.legend(fontsize=8)
    fig.suptitle(title or "Predicted scaling")
    fig.tight_layout()
    return fig


def allreduce_times(
    seconds: Mapping[str, Mapping[int, float]],
    limits: Mapping[str, float] | None = None,
    title: str = "",
) -> Figure:
    """All-reduce time against the number of ranks, one line per tensor ({"1 GB": {2: s, ...}}),
    log scales; `limits` ({"1 GB": s}) draws each tensor's bandwidth limit as a dashed line."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for index, (label, by_ranks) in enumerate(seconds.items()):
        ranks = sorted(by_ranks)
        ax.plot(ranks, [by_ranks[n] * 1e3 for n in ranks], "o-", color=f"C{index}", label=label)
        if limits and label in limits:
            ax.axhline(limits[label] * 1e3, color=f"C{index}", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks in the ring (N)")
    ax.set_ylabel("ms (log scale)" + ("; dashed: 2 S / beta" if limits else ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Ring all-reduce time against ranks")
    fig.tight_layout()
    return fig


def step_times_by_rank(
    step_seconds: Sequence[Sequence[float]], threshold: float, title: str = ""
) -> Figure:
    """Each rank's step times (`step_seconds[step][rank]`, dots) and its median over the steps
    (bars), against the median rank (solid line) and the straggler threshold above it (dashed)."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    by_rank = [statistics.median(column) for column in zip(*step_seconds, strict=True)]
    ranks = range(len(by_rank))
    ax.bar(ranks, by_rank, color="C0", alpha=0.5, label="median over the steps")
    for rank in ranks:
        times = [row[rank] for row in step_seconds]
        ax.plot([rank] * len(times), times, "k.", markersize=4)
    middle = statistics.median(by_rank)
    ax.axhline(middle, color="C2", label="median rank")
    ax.axhline(middle * (1 + threshold), color="C3", linestyle="--",
               label=f"threshold: {threshold:.0%} slower")
    ax.set_xticks(list(ranks))
    ax.set_xlabel("rank")
    ax.set_ylabel("seconds per step; dots: each step")
    ax.legend(fontsize=8)
    ax.set_title(title or "Step time of every rank")
    fig.tight_layout()
    return fig


def weight_histograms(
    groups: Mapping[str, Mapping[str, Sequence[float]]], title: str = ""
) -> Figure:
    """One panel per kind of matrix ({"attn.c_attn": {"layer 0": |w| values, ...}, ...}): the
    distribution of |w| per layer, on a log count axis (the tails are where pruning decides)."""
    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3), squeeze=False)
    for ax, (kind, layers) in zip(axes[0], groups.items(), strict=True):
        for label, values in layers.items():
            ax.hist(values, bins=60, histtype="step", log=True, label=label)
        ax.set_title(kind, fontsize=9)
        ax.set_xlabel("|w|")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("weights (log)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(title or "Where the weights are")
    fig.tight_layout()
    return fig


def perplexity_vs_sparsity(
    curves: Mapping[str, Mapping[float, float]], dense: float | None = None, title: str = ""
) -> Figure:
    """Perplexity (log axis) against the fraction of weights removed, one line per curve
    ({"global": {0.5: 31.2, ...}, ...}); `dense` draws the unpruned model's as a dashed line."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, points in curves.items():
        sparsities = sorted(points)
        ax.plot(sparsities, [points[s] for s in sparsities], "o-", label=label)
    if dense is not None:
        ax.axhline(dense, color="k", linestyle="--", linewidth=1, label="dense")
    ax.set_yscale("log")
    ax.set_xlabel("sparsity (fraction of weights set to zero)")
    ax.set_ylabel("held-out perplexity")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(curves) > 6 else 1)
    ax.set_title(title or "Perplexity against sparsity")
    fig.tight_layout()
    return fig


def per_window_perplexity(
    perplexities: Sequence[float], overall: float, marked: int = 0, title: str = ""
) -> Figure:
    """Each held-out window's perplexity (log axis), in order, with the perplexity over all of
    them as a dashed line; the first `marked` windows are drawn in another colour (a subset that
    another table is computed on)."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    colours = ["tab:orange" if i < marked else "tab:blue" for i in range(len(perplexities))]
    ax.bar(range(len(perplexities)), perplexities, color=colours)
    ax.axhline(overall, color="k", linestyle="--", linewidth=1, label=f"all windows: {overall:.2f}")
    ax.set_yscale("log")
    ax.set_xlabel("held-out window")
    ax.set_ylabel("perplexity")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Perplexity window by window")
    fig.tight_layout()
    return fig


def sensitivity_scan(
    scan: Mapping[str, Mapping[str, Mapping[float, float]]], dense: float, title: str = ""
) -> Figure:
    """One panel per kind of matrix ({"mlp.c_fc": {"layer 0": {sparsity: perplexity}}}): each
    line prunes one matrix alone, the rest of the model dense."""
    fig, axes = plt.subplots(1, len(scan), figsize=(3.2 * len(scan), 3.2), squeeze=False,
                             sharey=True)
    for ax, (kind, layers) in zip(axes[0], scan.items(), strict=True):
        for label, points in layers.items():
            sparsities = sorted(points)
            ax.plot(sparsities, [points[s] for s in sparsities], "o-", markersize=3, label=label)
        ax.axhline(dense, color="k", linestyle="--", linewidth=1)
        ax.set_yscale("log")
        ax.set_title(kind, fontsize=9)
        ax.set_xlabel("sparsity of this matrix")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("held-out perplexity")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(title or "Sensitivity: one matrix pruned at a time (dashed: dense)")
    fig.tight_layout()
    return fig


def sparsity_schedules(curves: Mapping[str, Sequence[float]], title: str = "") -> Figure:
    """Target sparsity against training step, one line per schedule."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for label, values in curves.items():
        ax.plot(range(len(values)), values, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("target sparsity")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Pruning schedules")
    fig.tight_layout()
    return fig


def quantization_grids(
    values: Sequence[float], grids: Mapping[str, Sequence[float]], title: str = ""
) -> Figure:
    """The weights of one group (a histogram) under the values each format can represent
    ({"int4 asymmetric": [...], "NF4": [...]}), one panel per format: where the grid points sit
    against where the weights are is what decides the rounding error."""
    fig, axes = plt.subplots(len(grids), 1, figsize=(7, 1.9 * len(grids)), squeeze=False,
                             sharex=True)
    for ax, (label, levels) in zip(axes[:, 0], grids.items(), strict=True):
        ax.hist(values, bins=80, color="0.6")
        for level in levels:
            ax.axvline(level, color="C3", linewidth=0.8)
        ax.set_ylabel("weights")
        ax.set_title(f"{label}: {len(levels)} values", fontsize=9)
    axes[-1][0].set_xlabel("weight value (red: the values the format can represent)")
    fig.suptitle(title or "One group of weights and the grids that round it")
    fig.tight_layout()
    return fig


def layer_errors(errors: Mapping[str, Mapping[str, float]], title: str = "") -> Figure:
    """Grouped bars of a relative error per layer ({"RTN": {"h.0.mlp.c_fc": 0.03, ...}, ...}),
    on a log axis: the methods side by side for every layer."""
    methods = list(errors)
    layers = list(errors[methods[0]])
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(7, 0.45 * len(layers)), 3.6))
    for index, method in enumerate(methods):
        positions = [x + (index - (len(methods) - 1) / 2) * width for x in range(len(layers))]
        ax.bar(positions, [errors[method][layer] for layer in layers], width, label=method)
    ax.set_xticks(range(len(layers)), layers, rotation=60, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("relative output error")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Output error per layer")
    fig.tight_layout()
    return fig


def bits_vs_perplexity(
    points: Mapping[str, Mapping[str, tuple[float, float]]], reference: float, title: str = ""
) -> Figure:
    """Perplexity against bits per weight, one marker series per method ({"RTN": {"int4, g128":
    (4.16, 17.3), ...}, ...}), each point labelled; `reference` (the float model) dashed. Down
    and to the left is better: a method whose points lie below another's wins at equal size."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for (method, series), marker in zip(points.items(), "os^vD", strict=False):
        ax.scatter([b for b, _ in series.values()], [p for _, p in series.values()], marker=marker,
                   label=method, zorder=3)
        for label, (bits, perplexity) in series.items():
            ax.annotate(label, (bits, perplexity), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")
    ax.axhline(reference, color="k", linestyle="--", linewidth=1, label="float")
    ax.set_yscale("log")
    ax.set_xlabel("bits per weight of the blocks' matrices (scales and zero points included)")
    ax.set_ylabel("held-out perplexity")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Bits per weight against perplexity")
    fig.tight_layout()
    return fig


def _seed_strip(ax, series: Mapping[str, Sequence[float]]) -> None:
    """Every seed's score as a dot, and beside each method with two or more seeds the mean with
    its 95% interval; each kind of mark named once in the legend, at its first appearance."""
    first_spread = next((x for x, v in enumerate(series.values()) if len(v) > 1), None)
    for x, values in enumerate(series.values()):
        offsets = [(i - (len(values) - 1) / 2) * 0.06 for i in range(len(values))]  # a strip
        ax.scatter([x + o for o in offsets], values, s=18, color="tab:blue", alpha=0.6,
                   label="one seed" if x == 0 else None)
        if len(values) > 1:
            spread = seed_spread(values)
            ax.errorbar(x + 0.25, spread.mean, yerr=spread.half_width, fmt="o", color="black",
                        capsize=4, label="mean, 95% interval" if x == first_spread else None)
    ax.set_xticks(range(len(series)), list(series), rotation=30, fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def finetune_methods(
    scores: Mapping[str, Sequence[float]],
    perplexities: Mapping[str, Sequence[float]],
    before: float,
    score_name: str = "chrF",
    title: str = "",
) -> Figure:
    """Fine-tuning methods over seeds: on the left the task score of every seed ({method: one
    score per seed}) with the mean and its 95% interval; on the right the general held-out
    perplexity after fine-tuning, seed by seed, against `before` (what each method forgets)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, series, label in ((left, scores, f"task {score_name}"),
                              (right, perplexities, "general held-out perplexity")):
        _seed_strip(ax, series)
        ax.set_ylabel(label)
    right.axhline(before, color="tab:gray", linestyle="--", label="before fine-tuning")
    left.set_title("gained on the task")
    right.set_title("forgotten elsewhere")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.suptitle(title or "Fine-tuning methods over seeds")
    fig.tight_layout()
    return fig


def bootstrap_draws(differences: Sequence[float], low: float, high: float, observed: float,
                    title: str = "") -> Figure:
    """The histogram of a paired bootstrap's drawn differences, with the observed difference and
    the 95% interval (the middle 95% of the draws): their skew is why the interval is read
    from percentiles, not from a mean and a standard deviation."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.hist(differences, bins=40, color="tab:blue", alpha=0.7)
    ax.axvline(observed, color="black", label=f"observed {observed:.3g}")
    for edge in (low, high):
        ax.axvline(edge, color="tab:orange", linestyle="--",
                   label="95% interval" if edge == low else None)
    ax.axvline(0, color="tab:gray", linewidth=1)
    ax.set_xlabel("difference b - a on a redrawn test set")
    ax.set_ylabel("draws")
    ax.set_title(title or f"{len(differences)} paired bootstrap draws")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- Lab 09: profiling and rooflines


def step_timeline(
    bars: Mapping[str, Sequence[tuple[float, float]]],
    phases: Mapping[str, tuple[float, float]],
    memory: tuple[Sequence[float], Sequence[int]] | None = None,
    title: str = "",
) -> Figure:
    """A profiled step: a row of bars per kind of operator ({kind: [(start ms, duration ms)]}),
    the phases shaded ({phase: (start ms, end ms)}), and below, when `memory` is given as
    (times ms, bytes), the memory allocated since the step began."""
    fig, axes = plt.subplots(2 if memory else 1, 1, figsize=(10, 5 if memory else 3.2),
                             sharex=True, squeeze=False)
    axes = [row[0] for row in axes]
    top = axes[0]
    for row, spans in enumerate(bars.values()):
        top.broken_barh(list(spans), (row - 0.4, 0.8), color=f"C{row % 10}")
    top.set_yticks(range(len(bars)), list(bars), fontsize=8)
    top.invert_yaxis()  # the first kind on top, as in a table
    for index, (phase, (start, end)) in enumerate(phases.items()):
        for ax in axes:
            ax.axvspan(start, end, color="0.88" if index % 2 else "0.96", zorder=0)
        top.annotate(phase, ((start + end) / 2, 1.0), xycoords=("data", "axes fraction"),
                     ha="center", va="bottom", fontsize=8)
    if memory:
        times, levels = memory
        axes[1].step(list(times), [b / 2**20 for b in levels], where="post")
        axes[1].set_ylabel("MiB allocated\nsince the step began")
        axes[1].grid(True, alpha=0.3)
    axes[-1].set_xlabel("ms since the step began")
    fig.suptitle(title or "Where a training step's time goes")
    fig.tight_layout()
    return fig


def operator_roofline(
    points: Sequence, bandwidth_gbs: float, peak_tflops: float, title: str = ""
) -> Figure:
    """Operators on a machine's roofline, log scales: each point (an object with `name`,
    `intensity` in FLOPs per byte and `gflops_per_s` achieved) under the roof, the slower of
    the bandwidth times the intensity and the peak; the ridge point dotted between them."""
    fig, ax = plt.subplots(figsize=(10, 4.8))
    intensities = [p.intensity for p in points]
    ridge = peak_tflops * 1e12 / (bandwidth_gbs * 1e9)
    low, high = min(intensities + [ridge]) / 4, max(intensities + [ridge]) * 4
    xs = [low * (high / low) ** (i / 200) for i in range(201)]
    roof = f"roofline: {bandwidth_gbs:.0f} GB/s, {peak_tflops * 1e3:.0f} GFLOP/s"
    ax.plot(xs, [min(peak_tflops * 1e3, bandwidth_gbs * x) for x in xs], color="black", label=roof)
    ax.axvline(ridge, linestyle=":", color="gray", label=f"ridge point {ridge:.1f} FLOPs/byte")
    markers = "osD^v<>ph*"  # colour and shape together tell ten operators apart
    for index, p in enumerate(points):
        ax.scatter(p.intensity, p.gflops_per_s, color=f"C{index % 10}", zorder=3,
                   marker=markers[index % len(markers)], label=p.name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    # Outside the axes: points cluster (the matmuls) where a legend inside would hide them.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(title or "Operators on this machine's roofline")
    fig.tight_layout()
    return fig


# -------------------------------------------------------- Lab 09, section 4: a Triton kernel


def attention_memory(
    seq_lens: Sequence[int],
    curves: Mapping[str, Sequence[float]],
    limit: tuple[str, float] | None = None,
    title: str = "",
) -> Figure:
    """Bytes against sequence length, one line per curve ({"N x N scores": [bytes per length],
    ...}: Lab 09's ways of holding attention's scores, Lab 11's context-parallel degrees), log
    scales; `limit` ("80 GB", bytes) is drawn as a dashed line."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, values in curves.items():
        ax.plot(seq_lens, values, "o-", label=label)
    if limit:
        ax.axhline(limit[1], color="gray", linestyle="--", linewidth=1)
        ax.annotate(limit[0], (seq_lens[0], limit[1]), va="bottom", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("bytes (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Attention's scores: all at once, or a tile at a time")
    fig.tight_layout()
    return fig


# ------------------------------------------------ Lab 09, sections 3 and 5: precision, compile


def accumulation_errors(errors: Mapping[str, Mapping[int, float]], title: str = "") -> Figure:
    """Relative error of a sum against its length K, one line per accumulator
    ({"bf16 accumulator": {16: 1e-3, ...}}), log-log: a slope of 1/2 is error that grows like
    the square root of K, random roundings partly cancelling."""
    return _log_log_lines(errors, 1.0, "terms summed, K (log scale)", "relative error (log scale)",
                          title or "Accumulation error against the length of the sum")


# ---------------------------------------------------------------- Lab 09, section 6: inference


def generation_step_times(
    step_seconds: Mapping[str, Sequence[float]], prompt_length: int, title: str = ""
) -> Figure:
    """Milliseconds per generated token against its position ({way: seconds of each step}; the
    first step reads the prompt): recomputing grows with the text, a KV cache stays nearly flat."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, seconds in step_seconds.items():
        positions = range(prompt_length, prompt_length + len(seconds))
        ax.plot(positions, [s * 1000 for s in seconds], label=name, linewidth=1.2)
    ax.set_xlabel("tokens in the text when the step runs (the first step reads the prompt)")
    ax.set_ylabel("ms per generated token")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Time per generated token")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- Lab 10: post-training


def method_scores(scores: Mapping[str, Sequence[float]], before: float, score_name: str,
                  before_name: str, title: str = "") -> Figure:
    """Methods over seeds ({method: one score per seed}): every seed's score, the mean with its
    95% interval, and the score they all started from (`before`, named `before_name`)."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    _seed_strip(ax, scores)
    ax.axhline(before, color="tab:gray", linestyle="--", label=before_name)
    ax.set_ylabel(score_name)
    ax.legend(fontsize=8)
    ax.set_title(title or "Methods over seeds")
    fig.tight_layout()
    return fig


def dpo_training(histories: Mapping[str, Sequence], title: str = "") -> Figure:
    """DPO runs step by step ({run: its llmlab.posttrain.DPOStep list}): on the left the implicit
    rewards of the chosen (solid) and the rejected (dashed) answers, on the right their mean
    log-probabilities under the policy: whether the chosen answers rise, or only fall less."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for index, (run, history) in enumerate(histories.items()):
        color = f"C{index % 10}"
        for ax, field in ((left, "reward"), (right, "logprob")):
            for side, style in (("chosen", "-"), ("rejected", "--")):
                ax.plot([getattr(step, f"{side}_{field}") for step in history], style,
                        color=color, label=f"{run}: {side}")
    left.axhline(0, color="tab:gray", linewidth=1)
    left.set_ylabel("implicit reward, beta (log pi - log pi_ref)")
    right.set_ylabel("log pi(answer | prompt)")
    for ax in (left, right):
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    left.legend(fontsize=7)
    fig.suptitle(title or "DPO, step by step")
    fig.tight_layout()
    return fig


def grpo_training(histories: Mapping[str, Sequence], title: str = "") -> Figure:
    """GRPO runs step by step ({run: its llmlab.posttrain.GRPOStep list}): the mean reward of the
    rollouts, the KL estimate to the reference and the entropy of the sampled tokens."""
    fields = (("reward", "mean reward of the rollouts"), ("kl", "KL(policy || reference)"),
              ("entropy", "entropy of the sampled tokens"))
    fig, axes = plt.subplots(1, len(fields), figsize=(12, 3.5))
    for index, (run, history) in enumerate(histories.items()):
        for ax, (field, _) in zip(axes, fields, strict=True):
            ax.plot([getattr(step, field) for step in history], color=f"C{index % 10}", label=run)
    for ax, (_, label) in zip(axes, fields, strict=True):
        ax.set_xlabel("step")
        ax.set_title(label, fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title or "GRPO, step by step")
    fig.tight_layout()
    return fig


def expert_load(imbalance: Mapping[str, Sequence[Sequence[float]]], title: str = "") -> Figure:
    """The busiest expert's load over the mean load, against step: one line per method (the mean
    of its seeds) in a band from the lowest seed to the highest. 1 is perfectly even."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for label, by_seed in imbalance.items():
        steps = range(1, len(by_seed[0]) + 1)
        per_step = list(zip(*by_seed, strict=True))
        (line,) = ax.plot(steps, [sum(v) / len(v) for v in per_step], label=label)
        ax.fill_between(steps, [min(v) for v in per_step], [max(v) for v in per_step],
                        color=line.get_color(), alpha=0.2)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    return _finish(fig, ax, "step", "busiest expert / mean", title or "Expert load")


def attention_work(work: Mapping[str, Sequence[int]], title: str = "") -> Figure:
    """Causal attention's work (query-key pairs) on each rank, one group of bars per split of
    the sequence ({"contiguous": [per rank], "zigzag": [...]})."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    width = 0.8 / len(work)
    for i, (label, per_rank) in enumerate(work.items()):
        ax.bar([r + i * width for r in range(len(per_rank))], per_rank, width, label=label)
    ranks = len(next(iter(work.values())))
    ax.set_xticks([r + 0.4 - width / 2 for r in range(ranks)], [f"rank {r}" for r in range(ranks)])
    ax.set_ylabel("query-key pairs")
    ax.set_title(title or "Causal attention's work per rank")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def lsh_s_curve(curves: Mapping[str, Sequence[float]], similarities: Sequence[float],
                points: Sequence[tuple[float, bool]], title: str = "") -> Figure:
    """The chance that a pair becomes an LSH candidate against its Jaccard similarity, one line per
    shape of bands ({label: [probability at each of `similarities`]}), and pairs measured as
    points: (similarity, whether it became a candidate) at 1 or 0."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for label, probabilities in curves.items():
        ax.plot(similarities, probabilities, label=label)
    if points:
        xs, found = zip(*points, strict=True)
        ax.scatter(xs, [float(f) for f in found], marker="|", s=200, color="black",
                   label="planted pairs (1: candidate)")
    return _finish(fig, ax, "Jaccard similarity of the pair's shingles",
                   "chance of being a candidate", title or "LSH's S-curve")
