"""What the course takes from the Hugging Face Hub, only with LLMLAB_ONLINE=1: GPT-2 small and
its tokenizer, Lab 08's pair of it with a code-summarization task, Lab 10's pair of a small
instruct model with GSM8K, and GPT-2's published losses beside Lab 03's model. Offline, nothing
here reaches the network."""

from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from llmlab.data import DatasetPaths
from llmlab.data.docstrings import DocstringPair, hub_docstring_pairs
from llmlab.data.errors import require_online
from llmlab.data.gsm8k import Problem, grpo_prompts, hub_gsm8k
from llmlab.data.pipeline import FULL_ONLINE_CORPUS
from llmlab.evaluate.bits_per_byte import published_bits_per_byte
from llmlab.network import ONLINE_VARIABLE, online
from llmlab.tables import markdown_table

HUB_MODEL = "gpt2"  # OpenAI's GPT-2 small: what online users fine-tune instead of Lab 03's model
# Lab 10's RL online: small (0.5B), and instruction-tuned with its own chat template, so it
# already gets some GSM8K problems right: GRPO learns only from groups whose rewards differ.
HUB_INSTRUCT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def hub_model(name: str = HUB_MODEL):
    """(model, tokenizer) of a pretrained model from the Hugging Face Hub, only with
    LLMLAB_ONLINE=1: GPT-2 small by default, pretrained on web text rather than on the standard
    library (pair it with llmlab.data.docstrings.hub_docstring_pairs). safetensors weights, no
    remote code."""
    # float32 weights: transformers loads a checkpoint in its stored dtype (Qwen's is bf16), where
    # an optimizer step of 1e-6 rounds away; mixed precision runs the matmuls in bf16 instead.
    model = AutoModelForCausalLM.from_pretrained(_online_only(name), use_safetensors=True,
                                                 dtype=torch.float32)
    return model, hub_tokenizer(name)


def hub_tokenizer(name: str = HUB_MODEL):
    """The tokenizer of a Hub model (GPT-2's by default), only with LLMLAB_ONLINE=1."""
    return AutoTokenizer.from_pretrained(_online_only(name))


def _online_only(name: str) -> str:
    require_online(name, instead="trained_model() (Lab 03's model, on every machine)")
    return name


def published_references(dataset: DatasetPaths, held_out_text: str) -> str:
    """Published held-out losses of GPT-2 small, in bits per byte of `held_out_text` (converted
    with the GPT-2 tokenizer's tokens per byte of it), as a table; they were measured on
    FineWeb(-Edu), so for any other dataset a line saying how to get comparable text instead."""
    if dataset.info["spec"]["corpus"] != FULL_ONLINE_CORPUS:
        return ("Published GPT-2 small losses are measured on FineWeb(-Edu), not on this text: "
                f"set {ONLINE_VARIABLE}=1 to train the full profile on FineWeb-Edu and compare.")
    rows = published_bits_per_byte(held_out_text, hub_tokenizer())
    title = "Published GPT-2 small losses, in bits per byte of this text:"
    return title + "\n" + markdown_table(rows, aligned=True)


@dataclass(frozen=True)
class HubTask:
    """Lab 08's online pair: a model pretrained elsewhere and a code-summarization task from
    GitHub, neither of which has seen the other."""

    model: object  # a transformers causal language model
    tokenizer: object
    train: list[DocstringPair]
    test: list[DocstringPair]


def hub_task(max_train: int, max_test: int) -> HubTask | None:
    """With LLMLAB_ONLINE=1, GPT-2 small (`hub_model`) and CodeXGLUE's Python functions
    (`hub_docstring_pairs`, the first `max_train` and `max_test`); offline, None, and nothing is
    read from the network."""
    if not online():
        return None
    model, tokenizer = hub_model()
    return HubTask(model, tokenizer, hub_docstring_pairs("train", max_train),
                   hub_docstring_pairs("test", max_test))


@dataclass(frozen=True)
class HubMathTask:
    """Lab 10's online pair: an instruction-tuned model and GSM8K's maths problems, whose answers
    a program checks (llmlab.data.gsm8k.gsm8k_reward)."""

    model: object  # a transformers causal language model
    tokenizer: object  # with the model's own chat template
    train: object  # a datasets.Dataset: a conversational "prompt" and the "answer" to check
    test: list[Problem]


def hub_math_task(max_train: int, max_test: int) -> HubMathTask | None:
    """With LLMLAB_ONLINE=1, Qwen2.5-0.5B-Instruct (`hub_model`) and the first `max_train` and
    `max_test` GSM8K problems (`hub_gsm8k`), the training ones as TRL's prompts; offline, None,
    and nothing is read from the network."""
    if not online():
        return None
    model, tokenizer = hub_model(HUB_INSTRUCT_MODEL)
    return HubMathTask(model, tokenizer, grpo_prompts(hub_gsm8k("train", max_train)),
                       hub_gsm8k("test", max_test))
