"""One table for the ways of running a model: size, latency (with how far it moved between
rounds), and agreement with a reference on the same token ids (largest logit difference, same most
likely token, perplexity)."""

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from llmlab.evaluate.next_token import perplexity_of
from llmlab.models import cross_entropy_on_ids
from llmlab.tables import markdown_table
from llmlab.timing import speedups, time_rounds
from llmlab.units import MB


@dataclass(frozen=True)
class EngineRow:
    engine: str
    size_mb: float
    latency_ms: float  # the median of the rounds' medians of one call on the ids
    speedup_low: float  # the reference's time over this one's, slowest of the paired rounds
    speedup_high: float  # ... and fastest: an engine is faster only if speedup_low > 1
    max_abs_diff: float  # largest |logit - reference logit|
    same_argmax: float  # fraction of positions whose most likely token is the reference's
    perplexity: float  # exp(mean cross-entropy of the ids' next tokens), as in Lab 07


def engine_rows(
    engines: Mapping[str, tuple[Callable[[torch.Tensor], torch.Tensor], int]],
    ids: torch.Tensor,
    *,
    repeats: int = 5,
    rounds: int = 3,
) -> list[EngineRow]:
    """engines: {name: (logits_fn, size in bytes)}; the first is the reference the others are
    compared with. Each runs on the same ids (batch, length), and is timed in `rounds` rounds
    (timing.time_rounds): the spread of the rounds is the noise a difference must stand clear of."""
    if not engines:
        raise ValueError("no engines to compare: pass {name: (logits_fn, size_bytes)}")
    if ids.dim() != 2 or ids.shape[1] < 2:
        raise ValueError(f"ids must be token ids of shape (batch, length >= 2), got "
                         f"{tuple(ids.shape)}")
    with torch.no_grad():
        logits = {name: fn(ids).float().cpu() for name, (fn, _) in engines.items()}
        timings = time_rounds({name: (lambda fn=fn: fn(ids)) for name, (fn, _) in engines.items()},
                              rounds=rounds, repeats=repeats)
    reference_name = next(iter(engines))
    reference = logits[reference_name]
    rows = []
    for name, (_, size_bytes) in engines.items():
        loss = cross_entropy_on_ids(logits[name], ids.cpu())
        ratios = speedups(timings[reference_name], timings[name])
        rows.append(EngineRow(
            engine=name,
            size_mb=size_bytes / MB,
            latency_ms=statistics.median(t.median_s for t in timings[name]) * 1000,
            speedup_low=min(ratios),
            speedup_high=max(ratios),
            max_abs_diff=(logits[name] - reference).abs().max().item(),
            same_argmax=(logits[name].argmax(-1) == reference.argmax(-1)).float().mean().item(),
            perplexity=perplexity_of(loss.item()),
        ))
    return rows


def engine_table(rows: Sequence[EngineRow]) -> str:
    """The rows as Markdown, numbers rounded for reading, the speed-up over the reference as the
    range of its rounds."""
    return markdown_table([{
        "engine": row.engine,
        "size_mb": f"{row.size_mb:.2f}",
        "latency_ms": f"{row.latency_ms:.1f}",
        "speedup_in_rounds": f"{row.speedup_low:.2f}-{row.speedup_high:.2f}x",
        "max_abs_diff": f"{row.max_abs_diff:.2g}",
        "same_argmax": f"{row.same_argmax:.4f}",
        "perplexity": f"{row.perplexity:.3f}",
    } for row in rows])
