"""One row per model variant: perplexity, accuracy, parameters, size on disk and latency."""

import tempfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median

import torch

from llmlab.evaluate.next_token import score_tokens
from llmlab.models.eval_mode import eval_mode
from llmlab.tables import markdown_table
from llmlab.timing import time_fn
from llmlab.units import GB


@dataclass(frozen=True)
class VariantRow:
    variant: str
    perplexity: float
    accuracy: float
    parameters: int  # stored numbers (a tied matrix once)
    nonzero: int  # of those, the ones that are not zero
    size_mb: float  # the safetensors files save_pretrained writes
    latency_ms: float  # median forward pass over one batch of the windows


def check_plain(model: torch.nn.Module, name: str = "model") -> None:
    """Refuse a model that still carries pruning masks or parametrizations: its saved files and
    counts would hold the original weights and the masks, not the pruned model."""
    extra = [n for n, _ in model.named_parameters() if n.endswith("_orig") or ".parametrizations."
             in n]
    if extra:
        raise ValueError(
            f"{name} still carries masks ({extra[0]}, ...): make them permanent first "
            "(llmlab.prune.make_permanent) so it is measured as it would be shipped"
        )


def size_on_disk(model: torch.nn.Module) -> int:
    """Bytes of the weight files `save_pretrained` writes (the config's few bytes left out)."""
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        return sum(path.stat().st_size for path in Path(folder).glob("*.safetensors"))


def latency_seconds(model: torch.nn.Module, ids: torch.Tensor, repeats: int = 5) -> float:
    """Median seconds of one no-grad forward pass over `ids` (timing.time_fn: warm-up, median)."""
    device = next(model.parameters()).device
    ids = ids.to(device)
    with torch.no_grad():
        return time_fn(lambda: model(ids), warmup=1, repeats=repeats, device=device).median_s


def eval_latency_seconds(model: torch.nn.Module, ids: torch.Tensor, repeats: int = 5) -> float:
    """latency_seconds in eval mode (no dropout, as the model is served); its mode comes back."""
    with eval_mode(model):
        return latency_seconds(model, ids, repeats)


def interleaved_latency_seconds(
    models: Mapping[str, torch.nn.Module], ids: torch.Tensor, repeats: int = 5
) -> dict[str, float]:
    """Each model's median seconds of one no-grad forward pass over `ids` in eval mode, timed in
    turns (A, B, C, A, B, C, ...) after one warm-up each: a slow spell of a shared machine then
    slows every model alike, instead of only the one being timed (a 1.8x "speed-up" of a zeroed
    model over its dense twin came from exactly that)."""
    seconds: dict[str, list[float]] = {name: [] for name in models}
    devices = {name: next(model.parameters()).device for name, model in models.items()}
    inputs = {name: ids.to(device) for name, device in devices.items()}  # moved once, not per turn
    with ExitStack() as modes, torch.no_grad():
        for model in models.values():
            modes.enter_context(eval_mode(model))
        for turn in range(repeats):
            for name, model in models.items():
                timing = time_fn(lambda m=model, x=inputs[name]: m(x), warmup=int(turn == 0),
                                 repeats=1, device=devices[name])
                seconds[name].append(timing.median_s)
    return {name: median(times) for name, times in seconds.items()}


def timed_batch(windows: Sequence[torch.Tensor], batch_size: int = 8) -> torch.Tensor:
    """The batch latency is measured on: up to `batch_size` windows as long as the first."""
    length = windows[0].numel()
    return torch.stack([w for w in windows if w.numel() == length][:batch_size])


def compare_variants(
    variants: Mapping[str, torch.nn.Module],
    windows: Sequence[torch.Tensor],
    *,
    batch_size: int = 8,
    repeats: int = 5,
) -> list[VariantRow]:
    """Measure every variant on the same held-out windows; latency on their first full batch."""
    if not variants or not windows:
        raise ValueError("need at least one variant and one held-out window to compare")
    for name, model in variants.items():
        check_plain(model, name)
    latencies = interleaved_latency_seconds(variants, timed_batch(windows, batch_size), repeats)
    rows = []
    for name, model in variants.items():
        scores = score_tokens(model, windows, batch_size)
        parameters = list(model.parameters())  # a tied matrix is yielded once
        latency = latencies[name]
        rows.append(VariantRow(
            variant=name,
            perplexity=scores.perplexity,
            accuracy=scores.accuracy,
            parameters=sum(p.numel() for p in parameters),
            nonzero=sum(int(torch.count_nonzero(p)) for p in parameters),
            size_mb=size_on_disk(model) / (GB / 1000),  # MB: 10^6 bytes, as GB is 10^9
            latency_ms=latency * 1000,
        ))
    return rows


def comparison_table(rows: Sequence[VariantRow]) -> str:
    """The rows as Markdown, numbers rounded for reading."""
    formats = {"perplexity": "{:.2f}", "accuracy": "{:.3f}", "parameters": "{:,}",
               "nonzero": "{:,}", "size_mb": "{:.2f}", "latency_ms": "{:.2f}"}
    return markdown_table([
        {key: formats.get(key, "{}").format(value) for key, value in asdict(row).items()}
        for row in rows
    ])
