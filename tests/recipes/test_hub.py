"""The Hub behind the online switch: offline, GPT-2 and its tokenizer are refused with the switch
named and Lab 08's and Lab 10's tasks are None without touching the network; online, GPT-2 pairs
with CodeXGLUE and the instruct model with GSM8K, a local folder stands in for the Hub (its
weights loaded in float32 whatever they were saved in), and published losses convert to this
text's bits per byte."""

import pytest
import torch
from helpers.train_fakes import tiny_gpt2
from transformers import AutoModelForCausalLM

from llmlab.data.errors import DataError
from llmlab.data.gsm8k import Problem
from llmlab.data.tokenization import train_bpe
from llmlab.recipes import hub


def test_the_hub_model_needs_the_online_switch(monkeypatch):
    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)
    with pytest.raises(DataError, match="set LLMLAB_ONLINE=1 before starting Python"):
        hub.hub_model()


@pytest.mark.parametrize("task", [hub.hub_task, hub.hub_math_task])
def test_the_hub_tasks_offline_are_none_and_never_touch_the_network(monkeypatch, task):
    import socket

    import datasets

    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)

    def network(*args, **kwargs):
        pytest.fail("the offline path reached for the network")

    monkeypatch.setattr(socket.socket, "connect", network)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", network)
    monkeypatch.setattr(datasets, "load_dataset", network)
    assert task(max_train=10, max_test=5) is None


def test_the_hub_task_online_pairs_the_hub_model_with_codexglue(monkeypatch):
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    model = tiny_gpt2()
    monkeypatch.setattr(hub, "hub_model", lambda: (model, "tokenizer"))
    asked = []
    monkeypatch.setattr(hub, "hub_docstring_pairs",
                        lambda split, n: asked.append((split, n)) or [split] * n)
    task = hub.hub_task(max_train=3, max_test=2)
    assert (task.model, task.tokenizer) == (model, "tokenizer")
    assert (task.train, task.test) == (["train"] * 3, ["test"] * 2)
    assert asked == [("train", 3), ("test", 2)]


def test_the_math_task_online_pairs_the_instruct_model_with_gsm8k(monkeypatch):
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    asked = []
    monkeypatch.setattr(hub, "hub_model", lambda name: asked.append(name) or ("model", "tok"))
    natalia = Problem("How many clips?", "48 + 24 = 72\n#### 72", "72")
    monkeypatch.setattr(hub, "hub_gsm8k",
                        lambda split, n: asked.append((split, n)) or [natalia] * n)
    task = hub.hub_math_task(max_train=3, max_test=2)
    assert asked == ["Qwen/Qwen2.5-0.5B-Instruct", ("train", 3), ("test", 2)]
    assert (task.model, task.tokenizer, task.test) == ("model", "tok", [natalia] * 2)
    assert task.train["answer"] == ["72"] * 3  # TRL's prompts, each with the answer to check
    assert task.train[0]["prompt"][-1] == {"role": "user", "content": "How many clips?"}


def test_the_hub_model_with_a_local_stand_in(tmp_path, monkeypatch):
    """A folder laid out as a Hub repository stands in for gpt2: the same loading path."""
    model = tiny_gpt2()
    model.save_pretrained(tmp_path)
    train_bpe(["def add(a, b):\n    return a + b\n"] * 5, vocab_size=280).save_pretrained(tmp_path)
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    loaded, tokenizer = hub.hub_model(str(tmp_path))
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert tokenizer.decode(tokenizer.encode("return a + b")) == "return a + b"


def test_the_hub_model_is_loaded_in_float32_whatever_it_was_saved_in(tmp_path, monkeypatch):
    """Qwen2.5's weights are stored in bf16, where an optimizer step of 1e-6 rounds away."""
    tiny_gpt2().to(torch.bfloat16).save_pretrained(tmp_path)
    train_bpe(["x = 1\n"] * 5, vocab_size=280).save_pretrained(tmp_path)
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    loaded, _ = hub.hub_model(str(tmp_path))
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}


def test_published_references_need_fineweb_text_and_never_reach_the_hub_without_it(monkeypatch):
    """On the built-in corpus (offline) the references do not apply: one line names the switch,
    and no tokenizer is fetched. On the FineWeb-Edu sample, GPT-2's tokenizer (a stand-in here)
    converts each published loss into this text's bits per byte."""
    from types import SimpleNamespace

    monkeypatch.setattr(hub, "hub_tokenizer", lambda: pytest.fail("fetched a tokenizer"))
    offline = SimpleNamespace(info={"spec": {"corpus": "builtin"}})
    assert "set LLMLAB_ONLINE=1" in hub.published_references(offline, "x = 1\n")
    stand_in = train_bpe(["The cell is the unit of life.\n"] * 5, vocab_size=280)
    monkeypatch.setattr(hub, "hub_tokenizer", lambda: stand_in)
    online = SimpleNamespace(info={"spec": {"corpus": "fineweb-edu"}})
    table = hub.published_references(online, "The cell is the unit of life.\n" * 4)
    assert "OpenAI's GPT-2 small (124M) checkpoint" in table and "3.2924" in table
    assert "llm.c's GPT-2 small, 10B tokens" in table


def test_the_hub_tokenizer_needs_the_online_switch(monkeypatch):
    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)
    with pytest.raises(DataError, match="set LLMLAB_ONLINE=1 before starting Python"):
        hub.hub_tokenizer()
