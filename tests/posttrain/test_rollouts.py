"""Rollouts: groups of sampled completions in the order of their prompts, the prompt given and
the completion labelled, each cut after its stop, the same for the same seed. Mistakes caught:
a group's rows scattered among other prompts', the prompt labelled (it would be trained on), a
completion run on past its stop, the caller's random state consumed."""

import pytest
import torch
from helpers.evaluation import code_tokenizer, generating_model

from llmlab.posttrain.rollouts import sample_groups
from llmlab.train.finetune import IGNORE

PROMPTS = ["def add", "def add(a, b):", "# Add", "return a"]  # of several lengths in tokens


@pytest.fixture(scope="module")
def tokenizer():
    return code_tokenizer()


def sampled(tokenizer, seed=0, stop_id=None, group_size=3, model=None):
    model = model or generating_model(tokenizer)
    stop = tokenizer("\n").input_ids[0] if stop_id is None else stop_id
    return sample_groups(model, tokenizer, PROMPTS, group_size, max_new_tokens=6, stop_id=stop,
                         seed=seed), stop


def test_each_prompt_gets_its_group_in_order_with_the_prompt_given_and_the_completion_labelled(
        tokenizer):
    rollouts, stop = sampled(tokenizer)
    assert rollouts.prompt_index == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert rollouts.group_size == 3
    for row, number in enumerate(rollouts.prompt_index):
        prompt = tokenizer(PROMPTS[number]).input_ids
        assert rollouts.ids[row, : len(prompt)].tolist() == prompt
        labelled = (rollouts.labels[row] != IGNORE).nonzero().flatten().tolist()
        assert labelled[0] == len(prompt)  # the completion starts right after the prompt...
        assert labelled == list(range(len(prompt), len(prompt) + len(labelled)))  # ...unbroken
        completion = rollouts.labels[row, labelled].tolist()
        assert completion == rollouts.ids[row, labelled].tolist()
        assert 1 <= len(completion) <= 6
        # cut after its first stop, or run to max_new_tokens
        assert stop not in completion[:-1]
        assert rollouts.finished[row] == (completion[-1] == stop)
        assert rollouts.completions[row] == tokenizer.decode(completion, skip_special_tokens=True)


def test_a_completion_stops_after_its_stop_token(tokenizer):
    # An untrained model rarely writes a newline: make the stop a token it writes often.
    loose, _ = sampled(tokenizer, stop_id=-1)  # -1 is no token: every completion runs to the end
    common = torch.mode(loose.labels[loose.labels != IGNORE]).values.item()
    rollouts, stop = sampled(tokenizer, stop_id=common)
    assert stop == common and any(rollouts.finished)
    for row in range(len(rollouts.prompt_index)):
        completion = rollouts.labels[row][rollouts.labels[row] != IGNORE].tolist()
        assert stop not in completion[:-1]
        if rollouts.finished[row]:
            assert completion[-1] == stop


def test_the_same_seed_gives_the_same_rollouts_and_leaves_the_callers_random_state(tokenizer):
    model = generating_model(tokenizer)  # seeds torch itself: before the state is read
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first, _ = sampled(tokenizer, seed=5, model=model)
    assert torch.equal(torch.get_rng_state(), before)
    again, _ = sampled(tokenizer, seed=5)
    other, _ = sampled(tokenizer, seed=6)
    assert torch.equal(first.ids, again.ids) and torch.equal(first.labels, again.labels)
    assert not torch.equal(first.ids, other.ids)


def test_no_prompts_or_an_empty_group_is_refused(tokenizer):
    model = generating_model(tokenizer)
    with pytest.raises(ValueError, match="group size"):
        sample_groups(model, tokenizer, PROMPTS, 0, max_new_tokens=4, stop_id=0)
    with pytest.raises(ValueError, match="prompts"):
        sample_groups(model, tokenizer, [], 2, max_new_tokens=4, stop_id=0)
