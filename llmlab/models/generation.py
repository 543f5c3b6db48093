"""One way to call Hugging Face's `generate` on a text prompt: in eval mode, seeded just before
it draws, with the prompt's own ids; `generate_batch`, many prompts of one length in one call
that give the same ids as one at a time (sampled too: each row draws from its own generator);
and `sample_batch`, a group of samples of each of many prompts in one call (post-training's
rollouts). Completions by decoding strategy
(llmlab.evaluate.decoding), samples side by side (llmlab.evaluate.samples) and the trainer's
samples all go through this module, so the same model, prompt, seed and options give the same
text wherever they are asked for."""

import math

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    MinPLogitsWarper,
    StopStringCriteria,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from llmlab.models.eval_mode import eval_mode


@torch.no_grad()
def generate_continuation(
    model: torch.nn.Module, tokenizer, prompt: str, *, seed: int, max_new_tokens: int, **options
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the prompt's token ids, the ids generated after them), each 1-D on the model's device.

    options: what `generate` takes (do_sample, num_beams, temperature, stop_strings, ...). The
    seed is set just before `generate` (sampling draws from torch's global generator); wrap the
    call in `torch.random.fork_rng` to leave the caller's random state as it was.
    """
    ids = tokenizer(prompt, return_tensors="pt").input_ids.to(next(model.parameters()).device)
    with eval_mode(model):
        torch.manual_seed(seed)
        output = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),  # one prompt, nothing padded
            max_new_tokens=max_new_tokens,
            # The course's tiny models may have no pad id; any id will do, nothing is padded.
            pad_token_id=tokenizer.pad_token_id or 0,
            tokenizer=tokenizer,  # read only for `stop_strings`, to find them in the tokens
            **options,
        )
    return ids[0], output[0, ids.shape[1] :]


def will_sample(model: torch.nn.Module, options: dict) -> bool:
    """Whether `generate` samples with these options (the model's own default where they are
    silent: some checkpoints ship do_sample=True)."""
    return bool(options.get("do_sample", model.generation_config.do_sample))


@torch.no_grad()
def generate_batch(
    model: torch.nn.Module, tokenizer, prompts: list[str], *, max_new_tokens: int,
    seeds: list[int] | None = None, **options
) -> list[torch.Tensor]:
    """The ids generated after each prompt, exactly those `generate_continuation` gives it alone,
    for prompts of the same length in tokens, in one call of `generate` (much faster than one
    prompt at a time). Equal lengths mean nothing is padded, so each prompt is read exactly as it
    is alone. Sampling needs `seeds`, one per prompt: each row then draws from a generator of its
    own, as `generate_continuation(prompt, seed=seed)` does, so no row depends on the others."""
    batch = _one_length(model, tokenizer, prompts)
    if will_sample(model, options):
        if seeds is None or len(seeds) != len(prompts):
            raise ValueError("a sampled batch needs one seed per prompt (seeds=...), so that no "
                             "prompt's sample depends on the prompts beside it")
        options = {**_each_row_draws(model, options, seeds, batch.device), "do_sample": False}
    with eval_mode(model):
        output = model.generate(
            batch,
            attention_mask=torch.ones_like(batch),
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id or 0,  # fills rows that stop early: cut below
            tokenizer=tokenizer,
            **options,
        )
    return _cut_where_alone_stops(model, tokenizer, output, batch.shape[1], options)


# Sampling options that a batch applies row by row; transformers' rarer ones (typical_p,
# epsilon_cutoff, eta_cutoff, top_h) are refused rather than silently dropped.
_ROW_SAMPLING = ("do_sample", "temperature", "top_k", "top_p", "min_p")
_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None}  # transformers' own


class _DrawPerRow(LogitsProcessor):
    """Sampling's last step with one generator per row: each row draws its token from the softmax
    of its scores, and every other token of the row is made impossible, so `generate`'s greedy
    choice takes the drawn one. A row's draws are those of `torch.multinomial` on the global
    generator seeded with the row's seed, as `generate` draws for one prompt alone."""

    def __init__(self, seeds: list[int], device: torch.device):
        self.generators = [torch.Generator(device).manual_seed(seed) for seed in seeds]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        drawn = torch.cat([torch.multinomial(row.softmax(dim=-1)[None], 1, generator=generator)
                           for row, generator in zip(scores, self.generators, strict=True)])
        return torch.full_like(scores, -math.inf).scatter_(1, drawn, 0.0)


def _each_row_draws(model: torch.nn.Module, options: dict, seeds: list[int], device) -> dict:
    """`options` for a greedy `generate` that samples row by row: transformers' warpers in its
    order (temperature, top-k, top-p, min-p), with its defaults where the options and the model's
    generation config are silent, then the per-row draw."""
    config = model.generation_config

    def setting(name):  # the options first, then the model's generation config
        return options.get(name, getattr(config, name, None))

    unknown = sorted(key for key in ("typical_p", "epsilon_cutoff", "eta_cutoff", "top_h")
                     if setting(key) not in (None, 0.0, 1.0))
    unknown += ["num_beams"] if (setting("num_beams") or 1) > 1 else []
    if unknown:
        raise ValueError(f"a sampled batch draws with {', '.join(_DEFAULTS)} only; got "
                         f"{unknown}: sample such options one prompt at a time "
                         "(generate_continuation)")
    given = {name: setting(name) for name in _DEFAULTS}
    temperature, top_k, top_p, min_p = (
        _DEFAULTS[name] if value is None else value for name, value in given.items())
    processors = [TemperatureLogitsWarper(temperature)] if temperature != 1.0 else []
    processors += [TopKLogitsWarper(top_k)] if top_k else []
    processors += [TopPLogitsWarper(top_p)] if top_p < 1.0 else []
    processors += [MinPLogitsWarper(min_p)] if min_p is not None else []
    rest = {key: value for key, value in options.items() if key not in _ROW_SAMPLING}
    return {**rest, "logits_processor": LogitsProcessorList([*processors,
                                                             _DrawPerRow(seeds, device)])}


@torch.no_grad()
def sample_batch(
    model: torch.nn.Module, tokenizer, prompts: list[str], *, samples: int, max_new_tokens: int,
    seed: int, **options
) -> list[torch.Tensor]:
    """`samples` sampled continuations of each prompt (prompts of one length in tokens), in one
    call of `generate`: the ids after each, cut where its row stopped, a prompt's samples next to
    each other. Unlike `generate_continuation`'s, these draws depend on which prompts share the
    call: right for reinforcement learning's rollouts, where only the distribution matters. The
    caller's random state is left as it was."""
    batch = _one_length(model, tokenizer, prompts)
    options = {"do_sample": True, **options}
    if "pad_token_id" not in options:  # fills rows that stopped early: cut below
        options["pad_token_id"] = tokenizer.pad_token_id or 0
    devices = [batch.device] if batch.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), eval_mode(model):
        torch.manual_seed(seed)
        output = model.generate(
            batch,
            attention_mask=torch.ones_like(batch),
            max_new_tokens=max_new_tokens,
            num_return_sequences=samples,
            tokenizer=tokenizer,
            use_cache=True,  # each new token reads the keys and values kept so far
            **options,
        )
    return _cut_where_alone_stops(model, tokenizer, output, batch.shape[1], options)


def _one_length(model: torch.nn.Module, tokenizer, prompts: list[str]) -> torch.Tensor:
    """The prompts' ids as one batch on the model's device; prompts of other lengths in tokens
    are refused (padding would change what the model reads)."""
    ids = [tokenizer(prompt).input_ids for prompt in prompts]
    lengths = sorted({len(row) for row in ids})
    if len(lengths) != 1:
        raise ValueError("a batch takes prompts of one length in tokens (padding would change "
                         f"what the model reads); got lengths {lengths}")
    return torch.tensor(ids, device=next(model.parameters()).device)


def _cut_where_alone_stops(
    model: torch.nn.Module, tokenizer, output: torch.Tensor, prompt_length: int, options: dict
) -> list[torch.Tensor]:
    """Each row's new ids, cut where the prompt alone would have stopped. A row that stops before
    the others is filled to the batch's length (with the pad id or further tokens under greedy,
    with -1 under beam search); generate stops a sequence after the first end-of-text id or stop
    string, so the same two checks find where."""
    new = output[:, prompt_length:]
    end_ids = options.get("eos_token_id", model.generation_config.eos_token_id)
    stopped = torch.isin(new, torch.tensor([] if end_ids is None else end_ids).to(new))
    if options.get("stop_strings"):
        # transformers' own check, so a stop is found exactly where generate found it; it reads
        # the prompt too (a stop can begin there). Beam search's filler (-1, which the check
        # cannot look up) lies past the stop: any id will do in its place.
        stop = StopStringCriteria(tokenizer, options["stop_strings"])
        checked = output.clamp(min=0)
        stopped |= torch.stack([stop(checked[:, : prompt_length + step + 1], None)
                                for step in range(new.shape[1])], dim=1)
    # A row ends after its first stop, or runs to max_new_tokens.
    steps = torch.arange(1, new.shape[1] + 1, device=new.device)
    ends = torch.where(stopped, steps, new.shape[1]).min(dim=1).values
    return [row[:end] for row, end in zip(new, ends.tolist(), strict=True)]
