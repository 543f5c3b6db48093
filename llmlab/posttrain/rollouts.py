"""Rollouts: the policy's own answers, sampled in groups, as the sequences the losses score.

Reinforcement learning and on-policy preference pairs both learn from what the model itself
writes. For each prompt the model samples a group of completions (at temperature 1, every token
drawn from the model's own distribution, so the log-probabilities the losses use are those of
the tokens it actually chose). `generate` keeps each sequence's keys and values as it goes (the
KV cache of Lab 09), so a group costs one forward pass per new token, not one per token written.

Prompts of one length in tokens are sampled together in one call (nothing padded, so each is
read exactly as it is alone); a completion ends after the first `stop_id` (the end of the
assistant's turn), which it keeps: the model must learn to stop, so the stop is trained too.
"""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from llmlab.models.generation import sample_batch
from llmlab.train.finetune import IGNORE


@dataclass(frozen=True)
class Rollouts:
    ids: torch.Tensor  # (rows, width): prompt then completion, padded on the right with stop_id
    labels: torch.Tensor  # (rows, width): the completion's ids, IGNORE on prompt and padding
    completions: list[str]  # each completion's text, special tokens left out
    prompt_index: list[int]  # the prompt each row answers; a group's rows are consecutive
    finished: list[bool]  # whether the completion stopped (else it ran to max_new_tokens)

    @property
    def group_size(self) -> int:
        return self.prompt_index.count(self.prompt_index[0])


def sample_groups(model: torch.nn.Module, tokenizer, prompts: Sequence[str], group_size: int, *,
                  max_new_tokens: int, stop_id: int, temperature: float = 1.0,
                  seed: int = 0) -> Rollouts:
    """`group_size` sampled completions of each prompt, rows in the order of `prompts`. The
    caller's random state is left as it was; the same seed gives the same rollouts."""
    if group_size < 1 or not prompts:
        raise ValueError(f"need prompts and a group size of 1 or more, got {len(prompts)} "
                         f"prompts and group_size={group_size}")
    encoded = [tokenizer(prompt).input_ids for prompt in prompts]
    by_length = defaultdict(list)  # token length -> the numbers of the prompts that long
    for number, ids in enumerate(encoded):
        by_length[len(ids)].append(number)
    completions: list[list[int]] = [[] for _ in range(len(prompts) * group_size)]
    for call, (_, numbers) in enumerate(sorted(by_length.items())):
        rows = sample_batch(model, tokenizer, [prompts[number] for number in numbers],
                            samples=group_size, max_new_tokens=max_new_tokens,
                            seed=seed * 1_000_003 + call, temperature=temperature,
                            top_k=0,  # top_k=0: the model's whole distribution
                            eos_token_id=stop_id, pad_token_id=stop_id)
        for row, new in enumerate(rows):
            number = numbers[row // group_size]  # a prompt's samples come together
            completions[number * group_size + row % group_size] = new.tolist()
    prompt_index = [number for number in range(len(prompts)) for _ in range(group_size)]
    rows = [encoded[number] + completion
            for number, completion in zip(prompt_index, completions, strict=True)]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), stop_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for row, (number, completion) in enumerate(zip(prompt_index, completions, strict=True)):
        start = len(encoded[number])
        ids[row, : len(rows[row])] = torch.tensor(rows[row])
        labels[row, start : len(rows[row])] = torch.tensor(completion, dtype=torch.long)
    return Rollouts(
        ids, labels,
        [tokenizer.decode(completion, skip_special_tokens=True) for completion in completions],
        prompt_index, [completion[-1:] == [stop_id] for completion in completions],
    )
