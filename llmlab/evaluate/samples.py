"""Generation samples from several model variants, side by side, with the same seed each."""

from collections.abc import Mapping, Sequence

import torch

from llmlab.models.generation import generate_continuation
from llmlab.tables import markdown_table


def generate_samples(
    variants: Mapping[str, torch.nn.Module],
    tokenizer,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 20,
    seed: int = 0,
    do_sample: bool = True,
    top_k: int = 50,
) -> list[dict[str, str]]:
    """One row per prompt: {"prompt": ..., variant name: its continuation, ...}.

    Each (variant, prompt) pair starts from the same seed, so two variants draw the same random
    numbers and differ only where their probabilities do: equal models give equal text.
    """
    if not variants or not prompts:
        raise ValueError("need at least one variant and one prompt")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    # top_k only means something when sampling; greedy decoding takes the most likely token.
    sampling = {"do_sample": True, "top_k": top_k} if do_sample else {"do_sample": False}
    rows = [{"prompt": prompt} for prompt in prompts]
    for name, model in variants.items():
        for row, prompt in zip(rows, prompts, strict=True):
            _, new = generate_continuation(
                model, tokenizer, prompt, seed=seed, max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens,  # equal lengths: the columns line up
                **sampling,
            )
            row[name] = tokenizer.decode(new, skip_special_tokens=True)
    return rows


def samples_table(rows: list[dict[str, str]]) -> str:
    """The samples as a Markdown table (line breaks and pipes escaped to stay in their cells)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ⏎ ")

    return markdown_table([{key: cell(value) for key, value in row.items()} for row in rows])
