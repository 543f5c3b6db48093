"""One table for the ways of running a model: size, latency, and agreement with a reference on
the same token ids (largest logit difference, same most likely token, perplexity)."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import torch

from llmlab.bench import markdown_table, time_fn
from llmlab.env import MB
from llmlab.evaluate.next_token import perplexity_of
from llmlab.models import cross_entropy_on_ids


@dataclass(frozen=True)
class EngineRow:
    engine: str
    size_mb: float
    latency_ms: float  # median of bench.time_fn over one call on the ids
    max_abs_diff: float  # largest |logit - reference logit|
    same_argmax: float  # fraction of positions whose most likely token is the reference's
    perplexity: float  # exp(mean cross-entropy of the ids' next tokens), as in Lab 07


def engine_rows(
    engines: Mapping[str, tuple[Callable[[torch.Tensor], torch.Tensor], int]],
    ids: torch.Tensor,
    *,
    repeats: int = 5,
) -> list[EngineRow]:
    """engines: {name: (logits_fn, size in bytes)}; the first is the reference the others are
    compared with. Each runs on the same ids (batch, length)."""
    if not engines:
        raise ValueError("no engines to compare: pass {name: (logits_fn, size_bytes)}")
    if ids.dim() != 2 or ids.shape[1] < 2:
        raise ValueError(f"ids must be token ids of shape (batch, length >= 2), got "
                         f"{tuple(ids.shape)}")  # fmt: skip
    rows, reference = [], None
    for name, (logits_fn, size_bytes) in engines.items():
        with torch.no_grad():
            logits = logits_fn(ids).float().cpu()
            seconds = time_fn(lambda fn=logits_fn: fn(ids), warmup=1, repeats=repeats).median_s
        reference = logits if reference is None else reference
        loss = cross_entropy_on_ids(logits, ids.cpu())
        rows.append(EngineRow(
            engine=name,
            size_mb=size_bytes / MB,
            latency_ms=seconds * 1000,
            max_abs_diff=(logits - reference).abs().max().item(),
            same_argmax=(logits.argmax(-1) == reference.argmax(-1)).float().mean().item(),
            perplexity=perplexity_of(loss.item()),
        ))  # fmt: skip
    return rows


def engine_table(rows: Sequence[EngineRow]) -> str:
    """The rows as Markdown, numbers rounded for reading."""
    formats = {"size_mb": "{:.2f}", "latency_ms": "{:.1f}", "max_abs_diff": "{:.2g}",
               "same_argmax": "{:.4f}", "perplexity": "{:.3f}"}  # fmt: skip
    return markdown_table([
        {key: formats.get(key, "{}").format(value) for key, value in asdict(row).items()}
        for row in rows
    ])  # fmt: skip
