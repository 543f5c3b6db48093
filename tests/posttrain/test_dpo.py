"""DPO's loss is TRL's: on a tiny GPT-2 against a second one as the reference (loss, gradients and
implicit rewards, through TRL's own `DPOTrainer._compute_loss`; with its SFT term on the chosen
answers too), and on given log-probabilities as far apart as a trained policy's. Mistakes
caught: the reference left out, the margin's sign flipped, beta outside the log-sigmoid, a sum
over the pairs, log(sigmoid) rounding to -inf, the SFT term averaged per answer, not per token."""

import math
from dataclasses import fields
from types import SimpleNamespace

import pytest
import torch
from helpers.trl_trainers import dpo_trainer, tiny_model, trl_dpo_loss
from trl import DPOConfig

from llmlab.posttrain import completion_logprobs, dpo_loss
from llmlab.train.finetune import IGNORE

FUSED = ("log_probs", "entropy", "mean_logits", "is_top1")  # what DPOTrainer asks its head for


def pairs(count: int = 4, width: int = 12, seed: int = 0):
    """TRL's batch of pairs: the chosen rows, then the rejected rows (the same prompt, another
    completion), padded on the right."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (2 * count, width), generator=generator)
    ids[count:, :4] = ids[:count, :4]  # each rejected answer has its chosen one's prompt
    attention = torch.ones_like(ids)
    completion = torch.zeros_like(ids)
    completion[:, 4:] = 1
    for row in range(0, 2 * count, 3):
        attention[row, -2:] = completion[row, -2:] = 0  # a shorter answer: padding after it
    return {"input_ids": ids, "attention_mask": attention, "completion_mask": completion}


def test_trl_s_default_dpo_loss_is_the_sigmoid_loss_with_beta_0_1():
    defaults = {field.name: field for field in fields(DPOConfig)}
    assert defaults["loss_type"].default_factory() == ["sigmoid"]
    assert defaults["beta"].default == 0.1


@pytest.mark.parametrize(("beta", "sft_weight"), [(0.1, 0.0), (0.5, 0.0), (0.1, 1.0), (0.5, 0.3)])
def test_dpo_loss_gradients_and_rewards_are_trls_on_a_tiny_model(beta, sft_weight):
    policy, reference = tiny_model(seed=0, fused_outputs=FUSED), tiny_model(seed=1)
    inputs = pairs()  # answers of two lengths: a mean over answers is not one over tokens
    trainer = dpo_trainer(policy, reference, beta, sft_weight=sft_weight)
    theirs = trl_dpo_loss(trainer, inputs)
    their_grads = torch.autograd.grad(theirs, list(policy.parameters()))

    labels = inputs["input_ids"].masked_fill(inputs["completion_mask"] == 0, IGNORE)
    args = inputs["input_ids"], labels, inputs["attention_mask"]
    with torch.no_grad():
        reference_chosen, reference_rejected = completion_logprobs(reference, *args).chunk(2)
    policy_chosen, policy_rejected = completion_logprobs(policy, *args).chunk(2)
    chosen_tokens = (labels != IGNORE).sum(dim=1).chunk(2)[0]
    ours = dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta,
                    sft_weight, chosen_tokens)
    our_grads = torch.autograd.grad(ours.loss, list(policy.parameters()))

    assert abs(ours.loss.item() - theirs.item()) < 1e-6
    for mine, trls in zip(our_grads, their_grads, strict=True):
        torch.testing.assert_close(mine, trls, rtol=1e-4, atol=1e-6)
    metrics = trainer._metrics["eval"]  # TRL files them by the model's mode: eval, no dropout
    for which in ("chosen", "rejected"):
        rewards = getattr(ours, f"{which}_rewards")
        assert rewards.mean().item() == pytest.approx(metrics[f"rewards/{which}"][0], abs=1e-6)


class GivenLogProbs:
    """A policy whose per-token log-probs are given: TRL's loss on exactly our numbers."""

    training = True

    def __init__(self, per_token):
        self.per_token = per_token

    def __call__(self, **kwargs):
        zeros = torch.zeros_like(self.per_token)
        return SimpleNamespace(log_probs=self.per_token, entropy=zeros, mean_logits=zeros,
                               is_top1=zeros.bool())


@pytest.mark.parametrize("spread", [1.0, 3000.0])  # 3000: margins where sigmoid rounds to 0
def test_dpo_loss_is_trls_on_given_log_probabilities(spread):
    generator = torch.Generator().manual_seed(int(spread))
    count, width = 16, 9
    per_token = -torch.rand(2 * count, width - 1, generator=generator) * spread / width
    reference = -torch.rand(2 * count, generator=generator) * spread
    inputs = {"input_ids": torch.zeros(2 * count, width, dtype=torch.long),
              "attention_mask": torch.ones(2 * count, width, dtype=torch.long),
              "completion_mask": torch.ones(2 * count, width, dtype=torch.long),
              "ref_chosen_logps": reference[:count], "ref_rejected_logps": reference[count:]}
    policy = GivenLogProbs(per_token)
    theirs = trl_dpo_loss(dpo_trainer(policy, None, 0.1, precompute_ref_logps=True), inputs)
    chosen, rejected = per_token.sum(-1).chunk(2)
    ours = dpo_loss(chosen, rejected, reference[:count], reference[count:], beta=0.1).loss
    assert math.isfinite(ours.item())
    assert abs(ours.item() - theirs.item()) < 1e-6 * max(1.0, abs(theirs.item()))


def test_a_policy_equal_to_its_reference_has_loss_log_2_and_rewards_0():
    logps = torch.tensor([-3.0, -7.5])
    result = dpo_loss(logps, logps - 1, logps, logps - 1, beta=0.3)
    assert result.loss.item() == pytest.approx(math.log(2))
    assert result.chosen_rewards.tolist() == result.rejected_rewards.tolist() == [0.0, 0.0]


def test_the_sft_term_needs_the_chosen_answers_lengths():
    logps = torch.tensor([-3.0, -7.5])
    with pytest.raises(ValueError, match="chosen_tokens"):
        dpo_loss(logps, logps, logps, logps, sft_weight=1.0)
    plain = dpo_loss(logps, logps - 1, logps, logps - 1).loss
    with_sft = dpo_loss(logps, logps - 1, logps, logps - 1, sft_weight=2.0,
                        chosen_tokens=torch.tensor([2, 3])).loss
    assert with_sft.item() == pytest.approx(plain.item() + 2.0 * 10.5 / 5)


def test_the_gradient_raises_the_chosen_answer_and_lowers_the_rejected_one():
    chosen = torch.tensor([-5.0, -2.0], requires_grad=True)
    rejected = torch.tensor([-4.0, -6.0], requires_grad=True)
    result = dpo_loss(chosen, rejected, torch.tensor([-4.0, -3.0]), torch.tensor([-4.0, -3.0]))
    result.loss.backward()
    assert bool((chosen.grad < 0).all()) and bool((rejected.grad > 0).all())  # descent: up, down
    assert not result.chosen_rewards.requires_grad


def test_on_policy_pairs_prefer_the_better_scored_completion_and_skip_ties():
    from helpers.evaluation import code_tokenizer, generating_model

    from llmlab.posttrain.dpo import preference_pairs

    tokenizer = code_tokenizer()
    prompts = ["def add", "# Add", "return a", "def"]

    def length(number, text):  # a toy verifier whose scores differ among untrained samples
        return float(len(text))

    pairs = preference_pairs(generating_model(tokenizer), tokenizer, prompts, length, 6,
                             max_new_tokens=5, stop_id=tokenizer("\n").input_ids[0])
    assert pairs
    for pair in pairs:
        prompt = pair.chosen.ids[: pair.chosen.prompt_length]
        assert pair.rejected.ids[: pair.rejected.prompt_length] == prompt
        number = [tokenizer(p).input_ids for p in prompts].index(list(prompt))
        chosen, rejected = (tokenizer.decode(example.ids[example.prompt_length :])
                            for example in (pair.chosen, pair.rejected))
        assert length(number, chosen) > length(number, rejected)
    assert not preference_pairs(generating_model(tokenizer), tokenizer, prompts,
                                lambda number, text: 1.0, 6, max_new_tokens=5, stop_id=0)


def test_pairs_with_written_answers_choose_the_answer_and_reject_a_worse_sample():
    from helpers.evaluation import code_tokenizer, generating_model

    from llmlab.posttrain.dpo import preference_pairs

    tokenizer = code_tokenizer()
    prompts = ["def add", "# Add", "return a", "def"]
    answers = ["(a, b):", " two numbers", " + b", " mul"]
    stop = tokenizer("\n").input_ids[0]

    def right(number, text):
        return float(text == answers[number])

    pairs = preference_pairs(generating_model(tokenizer), tokenizer, prompts, right, 3,
                             max_new_tokens=5, stop_id=stop, answers=answers)
    assert len(pairs) == len(prompts)  # an untrained model never writes the answer
    for number, pair in enumerate(pairs):
        prompt = tuple(tokenizer(prompts[number]).input_ids)
        assert pair.chosen.ids == (*prompt, *tokenizer(answers[number]).input_ids, stop)
        assert pair.chosen.prompt_length == pair.rejected.prompt_length == len(prompt)
        assert pair.rejected.ids[: len(prompt)] == prompt
        rejected = tokenizer.decode(pair.rejected.ids[len(prompt) :])
        assert rejected.removesuffix("\n") != answers[number]
    # A checker that accepts every sample as well as the answer gives no pair.
    assert not preference_pairs(generating_model(tokenizer), tokenizer, prompts,
                                lambda number, text: 1.0, 3, max_new_tokens=5, stop_id=stop,
                                answers=answers)
    with pytest.raises(ValueError, match="3 answers for 4 prompts"):
        preference_pairs(generating_model(tokenizer), tokenizer, prompts, right, 3,
                         max_new_tokens=5, stop_id=stop, answers=answers[:3])


def toy_pairs(rejected: str):
    """Four copies of one pair on "def add": "(a, b):" chosen over `rejected`; and a small
    untrained policy for them."""
    from helpers.evaluation import code_tokenizer, generating_model

    from llmlab.posttrain.dpo import PreferencePair
    from llmlab.train.finetune import TaskExample

    tokenizer = code_tokenizer()
    prompt = tuple(tokenizer("def add").input_ids)
    chosen, rejected = (tuple(tokenizer(text).input_ids) for text in ("(a, b):", rejected))
    pairs = [PreferencePair(TaskExample(prompt + chosen, len(prompt)),
                            TaskExample(prompt + rejected, len(prompt)))] * 4
    return pairs, generating_model(tokenizer)


def test_dpo_training_widens_the_gap_between_chosen_and_rejected():
    import copy

    from llmlab.posttrain.dpo import train_dpo

    pairs, policy = toy_pairs(" return")
    still = train_dpo(copy.deepcopy(policy), policy, pairs, steps=2, batch_size=2, lr=0.0,
                      progress=False)
    assert still[0].loss == pytest.approx(math.log(2)) and still[0].chosen_reward == 0
    history = train_dpo(copy.deepcopy(policy), policy, pairs, steps=10, batch_size=2, lr=1e-2,
                        progress=False)
    assert history[-1].loss < math.log(2) / 2
    assert history[-1].chosen_reward > 0 > history[-1].rejected_reward
    assert history[-1].accuracy == 1
    with pytest.raises(ValueError, match="cannot fill a batch"):
        train_dpo(policy, policy, pairs, steps=1, batch_size=5, lr=1e-3)


def test_the_sft_term_raises_the_chosen_answers_log_probability_where_plain_dpo_need_not():
    import copy

    from llmlab.posttrain.dpo import train_dpo

    pairs, policy = toy_pairs("(a, c):")
    runs = {weight: train_dpo(copy.deepcopy(policy), policy, pairs, steps=10, batch_size=2,
                              lr=1e-2, sft_weight=weight, progress=False)
            for weight in (0.0, 1.0)}
    plain, with_sft = (runs[weight][-1].chosen_logprob for weight in (0.0, 1.0))
    start = runs[0.0][0].chosen_logprob
    assert with_sft > start  # the SFT term lifts the chosen answer itself
    assert with_sft > plain + 0.5  # and by more than plain DPO, which only widens the gap
    assert runs[1.0][-1].accuracy == 1
