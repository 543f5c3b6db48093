"""Greedy generation through `decoder_forward`, recomputing everything each step or feeding a KV
cache one token at a time, and its timing per generated token."""

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from llmlab.inference.kv_cache import FullAttention, decoder_forward
from llmlab.timing import time_fn


@dataclass(frozen=True)
class Generation:
    tokens: torch.Tensor  # (batch, new_tokens): the generated ids
    logits: torch.Tensor  # (batch, new_tokens, vocab): the logits each token was chosen from
    step_seconds: tuple[float, ...]  # each step's time; the first one reads the whole prompt


def check_request(model, prompt: torch.Tensor, new_tokens: int) -> None:
    """Refuse what decoder_forward cannot run, each with what to do instead."""
    if not hasattr(getattr(model, "transformer", None), "wpe"):
        raise ValueError(f"{type(model).__name__} is not a GPT-2 language model (no "
                         "transformer.wpe): pass a transformers GPT2LMHeadModel")
    if model.training:
        raise ValueError("the model is in training mode (dropout on): call model.eval() first")
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1:
        shape = tuple(prompt.shape) if isinstance(prompt, torch.Tensor) else type(prompt).__name__
        raise ValueError(f"the prompt must be token ids of shape (batch, length >= 1), got "
                         f"{shape}: for one prompt use ids[None]")
    if new_tokens < 1:
        raise ValueError(f"new_tokens must be at least 1, got {new_tokens}")
    context = model.config.n_positions
    if prompt.shape[1] + new_tokens > context:
        raise ValueError(f"a prompt of {prompt.shape[1]} tokens plus {new_tokens} new ones "
                         f"exceeds the model's context of {context}: ask for fewer")


@torch.no_grad()
def greedy_generate(
    model,
    prompt: torch.Tensor,
    new_tokens: int,
    cache_class: Callable | None = None,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> Generation:
    """Greedy continuation of `prompt` (batch, length). Without `cache_class` every step runs the
    whole sequence (FullAttention); with it, `cache_class(n_layers)` is filled with the prompt,
    then fed one token per step."""
    check_request(model, prompt, new_tokens)
    cache = None if cache_class is None else cache_class(model.config.n_layer)
    ids = feed = prompt
    chosen, logits, seconds = [], [], []
    for _ in range(new_tokens):
        start = clock()
        if cache is None:
            last = decoder_forward(model, ids, FullAttention())[:, -1]
        else:
            last = decoder_forward(model, feed, cache)[:, -1]
        feed = last.argmax(-1, keepdim=True)
        if feed.device.type == "cuda":
            torch.cuda.synchronize(feed.device)  # the GPU runs ahead of Python: wait for it
        seconds.append(clock() - start)
        ids = torch.cat([ids, feed], dim=1)
        chosen.append(feed)
        logits.append(last)
    return Generation(torch.cat(chosen, dim=1), torch.stack(logits, dim=1), tuple(seconds))


@dataclass(frozen=True)
class GenerationTiming:
    tokens_per_second: float  # new tokens / median seconds of a whole generation
    step_seconds: tuple[float, ...]  # per step: the median over the timed runs


def time_generation(
    model,
    prompt: torch.Tensor,
    new_tokens: int,
    cache_class: Callable | None = None,
    *,
    warmup: int = 1,
    repeats: int = 3,
) -> GenerationTiming:
    """Time whole generations with timing.time_fn (the median of `repeats`), keeping each step's
    time from every timed run. Warm-up generations are 2 tokens long: they pay the first calls'
    costs (memory, kernel choice), which a full-length one would only repeat, slowly."""
    for _ in range(warmup):
        greedy_generate(model, prompt, min(2, new_tokens), cache_class)
    runs = []
    timing = time_fn(lambda: runs.append(greedy_generate(model, prompt, new_tokens, cache_class)),
                     warmup=0, repeats=repeats, device=prompt.device)
    per_step = zip(*(run.step_seconds for run in runs), strict=True)
    return GenerationTiming(new_tokens / timing.median_s,
                            tuple(statistics.median(seconds) for seconds in per_step))
