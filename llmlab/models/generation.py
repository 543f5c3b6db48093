"""One way to call Hugging Face's `generate` on a text prompt: in eval mode, seeded just before
it draws, with the prompt's own ids; `generate_batch`, many prompts of one length in one call
that give the same ids as one at a time; and `sample_batch`, a group of samples of each of many
prompts in one call (post-training's rollouts). Completions by decoding strategy
(llmlab.evaluate.decoding), samples side by side (llmlab.evaluate.samples) and the trainer's
samples all go through this module, so the same model, prompt, seed and options give the same
text wherever they are asked for."""

import torch
from transformers import StopStringCriteria

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
    model: torch.nn.Module, tokenizer, prompts: list[str], *, max_new_tokens: int, **options
) -> list[torch.Tensor]:
    """The ids generated after each prompt, exactly those `generate_continuation` gives it alone,
    for prompts of the same length in tokens, in one call of `generate` (much faster than one
    prompt at a time). Equal lengths mean nothing is padded, so each prompt is read exactly as it
    is alone. Deterministic options only (greedy, beam): a sampled batch would depend on which
    prompts share it."""
    if will_sample(model, options):
        raise ValueError("generate_batch decodes deterministically: sample with "
                         "generate_continuation, one seed per prompt")
    ids = [tokenizer(prompt).input_ids for prompt in prompts]
    lengths = sorted({len(row) for row in ids})
    if len(lengths) != 1:
        raise ValueError("generate_batch takes prompts of one length in tokens (padding would "
                         f"change what the model reads); got lengths {lengths}")
    batch = torch.tensor(ids, device=next(model.parameters()).device)
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
    ids = [tokenizer(prompt).input_ids for prompt in prompts]
    lengths = sorted({len(row) for row in ids})
    if len(lengths) != 1:
        raise ValueError(f"sample_batch takes prompts of one length in tokens; got {lengths}")
    batch = torch.tensor(ids, device=next(model.parameters()).device)
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
