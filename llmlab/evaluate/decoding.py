"""Completions under named decoding strategies: greedy, beam search, sampling at a temperature.

The same fine-tuned model scores differently depending on how its text is drawn, so the strategy
belongs next to every generated score. Greedy decoding takes the most likely token each step;
beam search keeps the `num_beams` most likely sequences and usually finds a likelier (often
shorter, blander) one; sampling draws from the distribution sharpened (temperature < 1) or
flattened (> 1). Sampling is random: each prompt gets its own seed, so a completion does not
depend on which prompts came before it or share its batch, and a score over several seeds can
carry an error bar. Every strategy decodes prompts of one length in tokens together, which is
much faster and gives the same text as one at a time.
"""

from collections import defaultdict
from collections.abc import Mapping, Sequence

import torch

from llmlab.models.generation import generate_batch, will_sample

STRATEGIES: dict[str, dict] = {
    "greedy": {"do_sample": False},
    "beam-4": {"do_sample": False, "num_beams": 4},
    # top_k=0 turns off transformers' default top-50 cut: the temperature alone shapes the draw.
    "sample-t0.7": {"do_sample": True, "temperature": 0.7, "top_k": 0},
    "sample-t1.0": {"do_sample": True, "temperature": 1.0, "top_k": 0},
}
# Prompts in one call of generate: enough to keep a GPU busy, few enough that beam search's
# num_beams sequences for each still fit in memory.
BATCH = 64


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
    """Each prompt's continuation (the prompt left out), cut before the first `stop`, in the order
    of `prompts`. `strategy` is a name in STRATEGIES or your own `generate` options. Up to BATCH
    prompts of one length in tokens are decoded at a time; sampling seeds prompt i with seed + i
    (greedy and beam search do not use the seed)."""
    if isinstance(strategy, Mapping):
        options = dict(strategy)
    elif strategy in STRATEGIES:
        options = STRATEGIES[strategy]
    else:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {sorted(STRATEGIES)}")
    # stop_strings ends generation at the stop (a summary is a few tokens out of max_new_tokens):
    # the text is the same, the steps after it are not computed.
    options = {**options, "stop_strings": [stop]} if stop else options
    sampled = will_sample(model, options)
    new_ids: list[torch.Tensor | None] = [None] * len(prompts)
    by_length = defaultdict(list)  # token length -> the numbers of the prompts that long
    for number, prompt in enumerate(prompts):
        by_length[len(tokenizer(prompt).input_ids)].append(number)
    for numbers in by_length.values():
        for start in range(0, len(numbers), BATCH):
            chunk = numbers[start : start + BATCH]
            # sampled: prompt i draws from its own generator, seeded seed + i
            seeds = [seed + number for number in chunk] if sampled else None
            rows = generate_batch(model, tokenizer, [prompts[i] for i in chunk], seeds=seeds,
                                  max_new_tokens=max_new_tokens, **options)
            for number, row in zip(chunk, rows, strict=True):
                new_ids[number] = row
    texts = [tokenizer.decode(new, skip_special_tokens=True) for new in new_ids]
    return [text.split(stop)[0] if stop else text for text in texts]
