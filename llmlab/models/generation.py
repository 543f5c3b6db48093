"""One way to call Hugging Face's `generate` on a text prompt: in eval mode, seeded just before
it draws, with the prompt's own ids (and `generate_batch` for prompts of one length at once). Completions by decoding strategy (llmlab.evaluate.decoding),
samples side by side (llmlab.evaluate.samples) and the trainer's samples all go through it, so
the same model, prompt, seed and options give the same text wherever they are asked for."""

import torch

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


@torch.no_grad()
def generate_batch(
    model: torch.nn.Module, tokenizer, prompts: list[str], *, max_new_tokens: int, **options
) -> list[torch.Tensor]:
    """The ids generated after each prompt, for prompts of the same length in tokens, in one call
    of `generate` (much faster than one prompt at a time). Equal lengths mean nothing is padded,
    so each prompt is read exactly as it is alone. Deterministic options only (greedy, beam): a
    sampled batch would depend on which prompts share it."""
    if options.get("do_sample"):
        raise ValueError("generate_batch decodes deterministically: sample with generate_continuation, "
                         "one seed per prompt")
    ids = [tokenizer(prompt).input_ids for prompt in prompts]
    if len({len(row) for row in ids}) != 1:
        raise ValueError("generate_batch takes prompts of one length in tokens (padding would change "
                         f"what the model reads); got lengths {sorted({len(row) for row in ids})}")
    batch = torch.tensor(ids, device=next(model.parameters()).device)
    with eval_mode(model):
        output = model.generate(
            batch,
            attention_mask=torch.ones_like(batch),
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id or 0,  # fills rows that stopped early
            tokenizer=tokenizer,
            **options,
        )
    return list(output[:, batch.shape[1] :])
