"""Lab 10's RL with verifiable rewards through the library a practitioner uses: TRL's
`GRPOTrainer`, on a pretrained model and a task with checked answers (GSM8K, online at `full`).

The course's own loop (llmlab.posttrain.grpo) is the one to read; this builds TRL's config with
the same choices, each stated, so the two runs differ in scale, not in the algorithm. TRL samples
each step's completions (with vLLM when it is installed and a GPU is there), calls every reward
function, and logs one row per step in `trainer.state.log_history`; `trl_steps` reads those rows
as the course's GRPOStep, so `llmlab.plots.grpo_training` draws either run.
"""

import importlib.util
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from llmlab.device import choose_dtype
from llmlab.posttrain.grpo import GRPOStep


def trl_reward(check: Callable[[str, str], float], column: str = "answer") -> Callable:
    """`check(completion text, reference)` in TRL's form of a reward function: TRL calls it with
    the completions (each a conversation: the assistant's one message) and every other column of
    the dataset as a keyword, one value per completion; `column` is the reference's column."""
    def reward(completions, **columns) -> list[float]:
        return [check(completion[-1]["content"], reference)
                for completion, reference in zip(completions, columns[column], strict=True)]

    reward.__name__ = check.__name__  # TRL logs each reward by its name: "rewards/<name>/mean"
    return reward


def trl_grpo_trainer(
    model,
    tokenizer,
    prompts,
    rewards: Sequence[Callable],
    *,
    output_dir: Path,
    steps: int,
    prompts_per_step: int = 8,
    num_generations: int = 8,
    max_completion_length: int = 256,
    learning_rate: float = 1e-6,
    beta: float = 0.04,
    eval_prompts=None,
    seed: int = 0,
):
    """TRL's GRPOTrainer for `model` (a transformers causal LM loaded from a folder or the Hub)
    and its `tokenizer` (with a chat template) on `prompts` (a datasets.Dataset with a
    conversational "prompt" column, as llmlab.data.gsm8k.grpo_prompts makes), scored by
    `rewards` (TRL's form: see trl_reward). Each of `steps` steps samples `num_generations`
    completions of `prompts_per_step` prompts and takes one optimizer step on them. Call
    `.train()` on it; with `eval_prompts` (the same form), `.evaluate()["eval_reward"]` is the
    mean reward of `num_generations` sampled completions of each: sampled pass@1 for a 0/1
    reward. No checkpoints are saved; `output_dir` (the lab's: a folder under
    llmlab.recipes.artifacts_dir()) holds TRL's run files."""
    from trl import GRPOConfig, GRPOTrainer  # (here: TRL is the course's extra, not a requirement)

    if tokenizer.chat_template is None:  # TRL would fail only at the first step, deep inside
        raise ValueError("the prompts are conversations and the tokenizer has no chat template: "
                         "give it one (llmlab.data.chat.add_chat_tokens) or use an instruct model")
    if beta and not model.config.name_or_path:
        raise ValueError("TRL loads the reference (beta > 0) again from where the model came "
                         "from, and this one came from nowhere: save_pretrained it to a folder "
                         "and load it from there")
    on_gpu = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        num_generations=num_generations,
        per_device_train_batch_size=num_generations,  # one prompt's group per forward and backward
        # Evaluation samples as a step does, prompts_per_step groups per call: one group per
        # call would make a 200-problem evaluation 200 calls of generate.
        per_device_eval_batch_size=num_generations * prompts_per_step,
        # ... and prompts_per_step groups, sampled together, make one optimizer step: on-policy.
        gradient_accumulation_steps=prompts_per_step,
        max_completion_length=max_completion_length,
        learning_rate=learning_rate,  # TRL's 1e-6: bigger steps break a pretrained model's skills
        loss_type="grpo",  # Exercise 3's form: each completion's token mean (TRL's default: "dapo")
        beta=beta,  # the KL penalty to a frozen reference, as Lab 10's loop (TRL's default 0: none)
        disable_dropout=True,  # else a token's log-prob differs pass to pass: noise in ratio, KL
        use_vllm=on_gpu and importlib.util.find_spec("vllm") is not None,  # vLLM samples faster
        vllm_mode="colocate",  # in this process, on this GPU: no vLLM server to start
        bf16=on_gpu and choose_dtype("cuda").dtype == torch.bfloat16,  # else fp32 (no fp16 scaler)
        logging_steps=1,  # one row of log_history per step: reward, KL, entropy
        save_strategy="no",  # the lab evaluates the model in memory; a checkpoint is GBs of Adam
        report_to="none",  # no experiment tracker: the lab plots log_history
        seed=seed,
    )
    return GRPOTrainer(model=model, reward_funcs=list(rewards), args=config,
                       train_dataset=prompts, eval_dataset=eval_prompts,
                       processing_class=tokenizer)


def trl_steps(log_history: Sequence[dict]) -> list[GRPOStep]:
    """The steps of a TRL run (`trainer.state.log_history`, one row per step) as GRPOSteps.
    TRL's entropy is the policy's own, from its logits (the course's loop estimates it from the
    sampled tokens); with beta 0 TRL keeps no reference and logs no KL (nan here)."""
    return [GRPOStep(reward=row["reward"], kl=row.get("kl", math.nan), entropy=row["entropy"],
                     clipped_fraction=row["clip_ratio/region_mean"])
            for row in log_history if "reward" in row]  # the last row is the run's summary
