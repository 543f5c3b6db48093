"""The chat format, packed conversations and their assistant-only labels, against transformers'
assistant mask and against the labels TRL's SFTTrainer builds and packs."""

import copy

import numpy as np
import pytest
import torch
from helpers.data_samples import small_bpe
from transformers import GPT2Config, GPT2LMHeadModel

from llmlab.data.chat import (
    CHAT_SPECIAL_TOKENS,
    ChatTokens,
    add_chat_tokens,
    assistant_labels,
    chat_tokens,
    pack_conversations,
    task_conversation,
)
from llmlab.data.tasks import TaskItem, task_splits

TOKENS = ChatTokens(system=50, user=51, assistant=52, end=53, eos=0)
S, U, A, E, EOS = 50, 51, 52, 53, 0
X = -100


@pytest.fixture(scope="module")
def tokenizer():
    """A copy: small_bpe() is cached and shared with other tests, and add_chat_tokens changes it."""
    tokenizer = copy.deepcopy(small_bpe())
    add_chat_tokens(tokenizer)
    return tokenizer


def date_items(count: int) -> list[TaskItem]:
    return task_splits("dates", {"train": count}, seed=3)["train"]


CONVERSATIONS = {
    "one turn": task_conversation(date_items(1)),
    "system and two turns": task_conversation(date_items(2), system="Write dates out."),
    "an empty reply": [{"role": "user", "content": "Say nothing."},
                       {"role": "assistant", "content": ""}],
    "no reply": [{"role": "system", "content": "Listen."}, {"role": "user", "content": "Hi."}],
}


def test_the_template_renders_the_format(tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1 + 2 ="},
                {"role": "assistant", "content": "3"}, {"role": "user", "content": "2 + 2 ="},
                {"role": "assistant", "content": "4"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        "<|system|>Be brief.<|end|><|user|>1 + 2 =<|end|><|assistant|>3<|end|>"
        "<|user|>2 + 2 =<|end|><|assistant|>4<|end|><|endoftext|>")
    # A prompt for generation: no eos, the assistant's role token last.
    assert tokenizer.apply_chat_template(messages[:2], tokenize=False,
                                         add_generation_prompt=True) == (
        "<|system|>Be brief.<|end|><|user|>1 + 2 =<|end|><|assistant|>")


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_a_rendered_conversation_round_trips_and_its_prompt_is_a_prefix(tokenizer, name):
    messages = CONVERSATIONS[name]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert tokenizer(text)["input_ids"] == ids
    # Each special token is one id, so the prompt's tokens are the conversation's first tokens
    # (TRL warns, and trains on another context, when they are not).
    if messages[-1]["role"] == "assistant":
        prompt = tokenizer.apply_chat_template(messages[:-1], tokenize=True, return_dict=True,
                                               add_generation_prompt=True)["input_ids"]
        assert ids[: len(prompt)] == prompt


def test_the_chat_tokens_are_one_id_each_and_adding_them_twice_changes_nothing(tokenizer):
    tokens = chat_tokens(tokenizer)
    assert [tokenizer.decode([i]) for i in (tokens.system, tokens.user, tokens.assistant,
                                            tokens.end, tokens.eos)] == [
        *CHAT_SPECIAL_TOKENS, "<|endoftext|>"]
    assert tokenizer("x<|user|>y")["input_ids"][1] == tokens.user  # never split
    size = len(tokenizer)
    assert add_chat_tokens(tokenizer) == tokens
    assert len(tokenizer) == size


def test_chat_tokens_asks_for_add_chat_tokens_first():
    with pytest.raises(ValueError, match="add_chat_tokens"):
        chat_tokens(copy.deepcopy(small_bpe()))


def test_an_unknown_role_is_refused(tokenizer):
    with pytest.raises(Exception, match="unknown role tool"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "42"}], tokenize=False)


def test_resizing_the_embeddings_starts_the_new_rows_at_the_mean_of_the_old():
    tokenizer = copy.deepcopy(small_bpe())
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=32,
                                       vocab_size=len(tokenizer)))
    old = model.get_input_embeddings().weight.detach().clone()
    tokens = add_chat_tokens(tokenizer)
    model.resize_token_embeddings(len(tokenizer))  # the caller's one line
    new = model.get_input_embeddings().weight.detach()
    assert new.shape == (len(old) + 4, 16) and model.config.vocab_size == len(tokenizer)
    torch.testing.assert_close(new[: len(old)], old, rtol=0, atol=0)
    mean = old.mean(dim=0).expand(4, -1)
    torch.testing.assert_close(new[len(old):], mean, rtol=0, atol=1e-3 * float(old.std()))
    assert model.lm_head.weight is model.get_input_embeddings().weight  # tied: both grew
    logits = model(torch.tensor([[tokens.user, 5, tokens.end, tokens.assistant]])).logits
    assert logits.shape == (1, 4, len(tokenizer))


def test_task_conversation_asks_each_item_in_turn_after_an_optional_system_message():
    first, second = TaskItem(1, "1 + 1 =", "2"), TaskItem(2, "2 + 3 =", "5")
    assert task_conversation([first]) == [{"role": "user", "content": "1 + 1 ="},
                                          {"role": "assistant", "content": "2"}]
    assert [m["role"] for m in task_conversation([first, second], system="Add.")] == [
        "system", "user", "assistant", "user", "assistant"]
    assert task_conversation([second], system="Add.")[0] == {"role": "system", "content": "Add."}


def test_pack_conversations_cuts_at_the_row_end_starts_rows_at_conversations_and_pads():
    packed = pack_conversations([[1, 2, 3, 0], [4, 5, 0], [6, 7, 8, 9, 10, 0], [11, 0]],
                                length=5, pad_id=0)
    np.testing.assert_array_equal(packed, [[1, 2, 3, 0, 4],  # the second one cut after 4
                                           [6, 7, 8, 9, 10],  # a long one cut to the row
                                           [11, 0, 0, 0, 0]])  # padded
    assert packed.dtype == np.int64
    exact = pack_conversations([(1, 0), np.array([2, 0])], length=2, pad_id=0)
    np.testing.assert_array_equal(exact, [[1, 0], [2, 0]])
    assert pack_conversations([], length=4, pad_id=0).shape == (0, 4)
    with pytest.raises(ValueError, match="length"):
        pack_conversations([[1]], length=0, pad_id=0)


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_the_labels_mark_what_transformers_assistant_mask_marks(tokenizer, name):
    encoded = tokenizer.apply_chat_template(CONVERSATIONS[name], tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
    labels = assistant_labels([encoded["input_ids"]], chat_tokens(tokenizer))
    assert (labels[0] != -100).long().tolist() == encoded["assistant_masks"]
    marked = labels[0] != -100
    assert labels[0][marked].tolist() == torch.tensor(encoded["input_ids"])[marked].tolist()


@pytest.mark.parametrize("row, expected", [
    ([S, 7, E, U, 8, E, A, 9, 9, E, EOS, EOS], [X, X, X, X, X, X, X, 9, 9, E, X, X]),
    ([U, 8, E, A, 9, E, U, 7, E, A, 6, E], [X, X, X, X, 9, E, X, X, X, X, 6, E]),
    ([U, 8, E, A, 9, 9, 9], [X, X, X, X, 9, 9, 9]),  # cut by the row's end
    ([U, 8, E, A, 9, 9, EOS, U, 7, E, A, 6], [X, X, X, X, 9, 9, X, X, X, X, X, 6]),  # by an eos
    ([U, 8, E, A, 9, U, 7, E, A, 6, E, EOS], [X, X, X, X, 9, X, X, X, X, 6, E, X]),  # by a role
    ([U, 8, E, A, E, EOS], [X, X, X, X, E, X]),  # an empty reply: only its end is learned
    ([U, 8, E, A], [X, X, X, X]),  # the assistant's role token alone
    ([EOS, EOS, EOS], [X, X, X]),  # padding
])
def test_assistant_labels_on_cut_and_edge_rows(row, expected):
    assert assistant_labels(torch.tensor([row]), TOKENS).tolist() == [expected]


def test_assistant_labels_takes_any_2d_array_and_keeps_its_shape():
    rows = [[U, 8, E, A, 9, E], [A, 9, E, EOS, EOS, EOS]]
    from_list = assistant_labels(rows, TOKENS)
    assert from_list.dtype == torch.long and from_list.shape == (2, 6)
    assert torch.equal(assistant_labels(np.array(rows), TOKENS), from_list)
    assert assistant_labels(torch.zeros(0, 6, dtype=torch.long), TOKENS).shape == (0, 6)
    with pytest.raises(ValueError, match="batch, length"):
        assistant_labels([U, 8, E], TOKENS)


def test_assistant_labels_of_packed_task_conversations(tokenizer):
    tokens = chat_tokens(tokenizer)
    conversations = [tokenizer.apply_chat_template(task_conversation(date_items(k)),
                                                   tokenize=True, return_dict=True,
                                                   return_assistant_tokens_mask=True)
                     for k in (1, 2, 1, 3)]
    length = 40
    ids = pack_conversations([c["input_ids"] for c in conversations], length, tokens.eos)
    # The same rows from the masks transformers made for each whole conversation.
    masks = pack_conversations([c["assistant_masks"] for c in conversations], length, 0)
    expected = np.where(masks == 1, ids, -100)
    np.testing.assert_array_equal(assistant_labels(ids, tokens).numpy(), expected)


@pytest.fixture(scope="module")
def trl_packed_rows(tokenizer, tmp_path_factory):
    """Conversations tokenized, labelled and packed by TRL's SFTTrainer (assistant_only_loss,
    packing with its default "bfd" strategy), one of them too long for a row and cut inside its
    reply. TRL does all of it when the trainer is built: its train_dataset holds the rows."""
    from datasets import Dataset

    trl = pytest.importorskip("trl")  # the course extra: Lab 10 installs it

    long_reply = "The date written out in words, in full, with every part of it spelled out: " * 3
    conversations = [
        task_conversation(date_items(1)),
        task_conversation(date_items(2), system="Write dates out."),
        [{"role": "user", "content": "Write it long."},
         {"role": "assistant", "content": long_reply}],
        task_conversation(date_items(3)[1:]),
        task_conversation(date_items(1), system="Be brief."),
    ]
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=64,
                                       vocab_size=len(tokenizer)))
    config = trl.SFTConfig(output_dir=str(tmp_path_factory.mktemp("sft")), packing=True,
                           max_length=64, assistant_only_loss=True, report_to=[], use_cpu=True,
                           disable_tqdm=True)
    dataset = Dataset.from_list([{"messages": messages} for messages in conversations])
    trainer = trl.SFTTrainer(model=model, args=config, processing_class=tokenizer,
                             train_dataset=dataset)
    rows = list(trainer.train_dataset)
    assert any(len(row["input_ids"]) == 64 and row["input_ids"][-1] != tokenizer.eos_token_id
               for row in rows), "no conversation was cut: the test would miss that case"
    return trainer.data_collator, rows


def test_assistant_labels_equal_trls_on_its_padding_free_batch(tokenizer, trl_packed_rows):
    """bfd packing makes TRL flatten the batch into one row (padding_free): a cut conversation is
    followed at once by the next one's role token, with no eos between them."""
    collator, rows = trl_packed_rows
    assert collator.padding_free
    batch = collator(rows)
    assert batch["input_ids"].shape[0] == 1
    assert torch.equal(assistant_labels(batch["input_ids"], chat_tokens(tokenizer)),
                       batch["labels"])


def test_assistant_labels_equal_trls_on_its_padded_batch(tokenizer, trl_packed_rows):
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    _, rows = trl_packed_rows
    batch = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id)(rows)
    assert batch["input_ids"].shape[0] == len(rows) > 1
    assert torch.equal(assistant_labels(batch["input_ids"], chat_tokens(tokenizer)),
                       batch["labels"])
