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

STRATEGIES: dict[str, dict] = {
    "greedy": {"do_sample": False},
    "beam-4": {"do_sample": False, "num_beams": 4},
    # top_k=0 turns off transformers' default top-50 cut: the temperature alone shapes the draw.
    "sample-t0.7": {"do_sample": True, "temperature": 0.7, "top_k": 0},
    "sample-t1.0": {"do_sample": True, "temperature": 1.0, "top_k": 0},
}


@torch.no_grad()
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
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    completions = []
    try:
        for number, prompt in enumerate(prompts):
            ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
            torch.manual_seed(seed + number)  # per prompt: independent of the other prompts
            # stop_strings ends generation at the stop (a summary is a few tokens out of
            # max_new_tokens): the text is the same, the steps after it are not computed.
            stopping = {"stop_strings": [stop], "tokenizer": tokenizer} if stop else {}
            output = model.generate(ids, attention_mask=torch.ones_like(ids),
                                    max_new_tokens=max_new_tokens,
                                    pad_token_id=tokenizer.pad_token_id or 0,
                                    **stopping, **options)  # fmt: skip
            text = tokenizer.decode(output[0, ids.shape[1] :], skip_special_tokens=True)
            completions.append(text.split(stop)[0] if stop else text)
    finally:
        model.train(was_training)
    return completions
