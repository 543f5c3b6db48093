"""Completions under named decoding strategies: greedy, beam search, sampling at a temperature.

The same fine-tuned model scores differently depending on how its text is drawn, so the strategy
belongs next to every generated score. Greedy decoding takes the most likely token each step;
beam search keeps the `num_beams` most likely sequences and usually finds a likelier (often
shorter, blander) one; sampling draws from the distribution sharpened (temperature < 1) or
flattened (> 1). Sampling is random: each prompt gets its own seed, so a completion does not
depend on which prompts came before it, and a score over several seeds can carry an error bar.
"""

from collections.abc import Mapping, Sequence

import torch

from llmlab.models.generation import generate_continuation

STRATEGIES: dict[str, dict] = {
    "greedy": {"do_sample": False},
    "beam-4": {"do_sample": False, "num_beams": 4},
    # top_k=0 turns off transformers' default top-50 cut: the temperature alone shapes the draw.
    "sample-t0.7": {"do_sample": True, "temperature": 0.7, "top_k": 0},
    "sample-t1.0": {"do_sample": True, "temperature": 1.0, "top_k": 0},
}


def complete(
    model: torch.nn.Module,
    tokenizer,
    prompts: Sequence[str],
    strategy: str | Mapping = "greedy",
    *,
    max_new_tokens: int = 24,
    stop: str | None = "\n",
    seed: int = 0,
) -> list[str]:
    """Each prompt's continuation (the prompt left out), cut before the first `stop`. `strategy`
    is a name in STRATEGIES or your own `generate` options; prompt i is seeded with seed + i."""
    if isinstance(strategy, Mapping):
        options = dict(strategy)
    elif strategy in STRATEGIES:
        options = STRATEGIES[strategy]
    else:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {sorted(STRATEGIES)}")
    completions = []
    for number, prompt in enumerate(prompts):
        # stop_strings ends generation at the stop (a summary is a few tokens out of
        # max_new_tokens): the text is the same, the steps after it are not computed.
        stopping = {"stop_strings": [stop]} if stop else {}
        # seeded per prompt: a completion is independent of the other prompts
        _, new = generate_continuation(
            model, tokenizer, prompt, seed=seed + number, max_new_tokens=max_new_tokens,
            **stopping, **options,
        )
        text = tokenizer.decode(new, skip_special_tokens=True)
        completions.append(text.split(stop)[0] if stop else text)
    return completions
