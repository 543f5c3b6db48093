"""RL with verifiable rewards through TRL's own GRPOTrainer: a checker in TRL's reward form gets
each completion's text beside its own reference; the config makes the course's choices (Lab 10's
loss and KL penalty; vLLM and bf16 only on a GPU that has them); a tokenizer without a chat
template and a model TRL cannot reload as the reference are refused before training; and two
real steps on the CPU, with a tiny GPT-2 built here and GSM8K-format stand-ins, log reward and
KL per step and change the weights."""

import copy
import math
import types

import pytest
import torch
from helpers.data_samples import small_bpe
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from llmlab.data.chat import add_chat_tokens
from llmlab.data.gsm8k import grpo_prompts, gsm8k_reward, parse_record
from llmlab.posttrain import trl_grpo
from llmlab.posttrain.grpo import GRPOStep
from llmlab.posttrain.trl_grpo import trl_grpo_trainer, trl_reward, trl_steps

trl = pytest.importorskip("trl")

RECORDS = [{"question": f"Ann has {a} apples and gets {b} more. How many has she now?",
            "answer": f"She has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"}
           for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]]


def said(text: str) -> list[dict]:
    """A completion as TRL hands a conversational one to a reward: the assistant's message."""
    return [{"role": "assistant", "content": text}]


def test_a_checker_in_trls_form_scores_each_completion_against_its_own_reference():
    reward = trl_reward(gsm8k_reward)
    completions = [said("2 + 1 = 3\n#### 3"), said("#### 3"), said("no idea")]
    # TRL passes the prompts, the other columns (one value per completion) and its own extras.
    scores = reward(prompts=["p1", "p2", "p3"], completions=completions, answer=["3", "7", "7"],
                    completion_ids=[[1], [2], [3]], trainer_state=None)
    assert scores == [1.0, 0.0, 0.0]
    assert reward.__name__ == "gsm8k_reward"  # TRL logs it as rewards/gsm8k_reward/mean


def test_the_reference_column_is_the_one_named():
    reward = trl_reward(lambda text, reference: float(text == reference), column="label")
    assert reward(completions=[said("a"), said("b")], label=["a", "a"], answer=["b", "b"]) == [1, 0]


class Recorder:
    """Stands in for GRPOConfig and GRPOTrainer: keeps what it was built with."""

    def __init__(self, **given):
        self.given = given


def config_on(monkeypatch, *, gpu: bool, vllm: bool, bf16: bool) -> dict:
    """What trl_grpo_trainer gives GRPOConfig on a machine described by the three flags."""
    monkeypatch.setattr(trl, "GRPOConfig", Recorder)
    monkeypatch.setattr(trl, "GRPOTrainer", Recorder)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(trl_grpo.importlib.util, "find_spec",
                        lambda name: object() if vllm and name == "vllm" else None)
    dtype = types.SimpleNamespace(dtype=torch.bfloat16 if bf16 else torch.float16)
    monkeypatch.setattr(trl_grpo, "choose_dtype", lambda device: dtype)
    model = types.SimpleNamespace(config=types.SimpleNamespace(name_or_path="a/model"))
    tokenizer = types.SimpleNamespace(chat_template="{{ messages }}")
    trainer = trl_grpo_trainer(model, tokenizer, "prompts", [len], output_dir="run", steps=3)
    return trainer.given["args"].given


def test_the_config_makes_lab_10s_choices(monkeypatch):
    config = config_on(monkeypatch, gpu=False, vllm=False, bf16=False)
    assert config["loss_type"] == "grpo" and config["beta"] == 0.04  # TRL's: "dapo" and 0
    assert config["max_steps"] == 3 and config["logging_steps"] == 1
    assert config["report_to"] == "none" and config["save_strategy"] == "no"
    assert config["disable_dropout"] is True
    # One group per micro-batch, prompts_per_step of them to an optimizer step.
    assert config["per_device_train_batch_size"] == config["num_generations"] == 8
    assert config["gradient_accumulation_steps"] == 8
    # Evaluation samples as a step does: 8 groups to a call, not one (200 calls for 200 problems).
    assert config["per_device_eval_batch_size"] == 64


@pytest.mark.parametrize(("gpu", "vllm", "bf16", "uses_vllm", "uses_bf16"), [
    (False, True, True, False, False),  # no GPU: neither, whatever is installed
    (True, False, True, False, True),  # a GPU without vLLM: transformers' generate
    (True, True, True, True, True),
    (True, True, False, True, False),  # a GPU without bf16 (a T4): fp32, not fp16
])
def test_vllm_and_bf16_only_on_a_gpu_that_has_them(monkeypatch, gpu, vllm, bf16, uses_vllm,
                                                   uses_bf16):
    config = config_on(monkeypatch, gpu=gpu, vllm=vllm, bf16=bf16)
    assert (config["use_vllm"], config["bf16"]) == (uses_vllm, uses_bf16)


def test_trl_steps_reads_each_step_and_skips_the_summary():
    row = {"reward": 0.5, "kl": 0.01, "entropy": 2.0, "clip_ratio/region_mean": 0.1, "loss": 0.2}
    summary = {"train_runtime": 1.0, "train_loss": 0.2}
    assert trl_steps([row, row | {"reward": 0.75}, summary]) == [
        GRPOStep(0.5, 0.01, 2.0, 0.1), GRPOStep(0.75, 0.01, 2.0, 0.1)]
    without_reference = {key: value for key, value in row.items() if key != "kl"}  # beta 0
    assert math.isnan(trl_steps([without_reference])[0].kl)


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    """A tiny GPT-2 (randomly initialised) with the course's chat template, saved and loaded
    from a folder, as a Hub model is: TRL loads the reference from the same place."""
    tokenizer = copy.deepcopy(small_bpe())  # a copy: small_bpe() is shared with other tests
    tokens = add_chat_tokens(tokenizer)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=256,
                        vocab_size=len(tokenizer), eos_token_id=tokens.eos)
    folder = tmp_path_factory.mktemp("tiny_policy")
    GPT2LMHeadModel(config).save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.generation_config.eos_token_id = tokens.end  # an answer ends with the assistant's <|end|>
    return model, tokenizer


def test_a_tokenizer_without_a_chat_template_is_refused_before_training(tiny_policy, tmp_path):
    model, tokenizer = tiny_policy
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        trl_grpo_trainer(model, plain, grpo_prompts([]), [], output_dir=tmp_path, steps=1)


def test_a_model_from_nowhere_is_refused_when_there_is_a_reference(tiny_policy, tmp_path):
    """TRL reloads the reference from model.config's path; a model built in memory has none,
    and TRL's own error would be an obscure one about a repository id."""
    _, tokenizer = tiny_policy
    built = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=1, vocab_size=len(tokenizer)))
    assert built.config.name_or_path == ""
    with pytest.raises(ValueError, match="save_pretrained it to a folder"):
        trl_grpo_trainer(built, tokenizer, grpo_prompts([]), [], output_dir=tmp_path, steps=1)


def test_two_steps_of_trls_grpo_on_the_cpu_log_reward_and_kl_and_move_the_weights(
        tiny_policy, tmp_path, monkeypatch):
    """The GSM8K reward gets each completion with its own problem's answer, through TRL. A
    random model never answers right, so a stand-in reward that varies (the completion's length)
    gives the groups advantages to learn from. KL is 0 at the first step (the policy is the
    reference) and above 0 at the second: the reference stayed where the policy started."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # no vLLM, no bf16: anywhere
    model, tokenizer = tiny_policy
    model = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]
    answers_seen = []

    def gsm8k_spy(completion: str, reference: str) -> float:
        answers_seen.append(reference)
        return gsm8k_reward(completion, reference)

    def length(completions, **columns) -> list[float]:
        return [len(completion[-1]["content"]) / 10 for completion in completions]

    trainer = trl_grpo_trainer(
        model, tokenizer, grpo_prompts([parse_record(r) for r in RECORDS]),
        [trl_reward(gsm8k_spy), length], output_dir=tmp_path, steps=2, prompts_per_step=2,
        num_generations=4, max_completion_length=8, learning_rate=1e-2,
        eval_prompts=grpo_prompts([parse_record(r) for r in RECORDS[:2]]))
    evaluation = trainer.evaluate()  # the lab's score before and after: sampled, as in training
    assert len(answers_seen) == 8 and set(answers_seen) <= {"3", "7"}  # 2 problems x 4 samples
    assert 0 <= evaluation["eval_rewards/gsm8k_spy/mean"] <= 1
    assert evaluation["eval_reward"] > 0  # the length stand-in's share of the summed reward
    answers_seen.clear()
    trainer.train()

    steps = trl_steps(trainer.state.log_history)
    assert len(steps) == 2
    assert all(math.isfinite(step.reward) and step.entropy > 0 for step in steps)
    assert steps[0].kl == pytest.approx(0, abs=1e-6) and steps[1].kl > 1e-6
    rows = [row for row in trainer.state.log_history if "reward" in row]
    assert all("rewards/gsm8k_spy/mean" in row and "rewards/length/mean" in row for row in rows)
    # 2 steps x 2 prompts x 4 completions, each scored against its own problem's answer.
    assert len(answers_seen) == 16 and set(answers_seen) <= {"3", "7", "11", "15"}
    assert all(len(set(answers_seen[i:i + 4])) == 1 for i in range(0, 16, 4))  # one per group
    assert any(not torch.equal(b, a) for b, a in zip(before, model.parameters(), strict=True))
