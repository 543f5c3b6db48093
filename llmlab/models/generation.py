"""One way to call Hugging Face's `generate` on a text prompt: in eval mode, seeded just before
it draws, with the prompt's own ids. Completions by decoding strategy (llmlab.evaluate.decoding),
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
