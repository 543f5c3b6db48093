"""Conversations as training text: the chat format, packing conversations into rows, and the
labels that train the model on the assistant's words only.

The format, one string per conversation:

    <|system|>Be brief.<|end|><|user|>2 + 3 =<|end|><|assistant|>5<|end|><|endoftext|>

A message is its role's token, its content and "<|end|>" (the end of a turn: what the model
learns to write when its reply is done, so generation can stop there); the system message is
optional, and user and assistant turns may repeat. The tokenizer's eos "<|endoftext|>" ends the
conversation, as it ends every document since Lab 01, so packed conversations are separated by it.
The chat template renders the eos itself, so TRL, which adds none to conversations, trains on the
same tokens.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from llmlab.data.packing import IGNORE_INDEX
from llmlab.data.tasks import TaskItem

CHAT_SPECIAL_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")  # ChatTokens' order

# Jinja, as transformers renders it. {% generation %} marks what the assistant writes (its content
# and its <|end|>): apply_chat_template(..., return_assistant_tokens_mask=True) turns the marked
# characters into the mask TRL's assistant_only_loss trains on.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' + message['role'] + ': use system, user or assistant') }}"
    "{% elif message['role'] == 'assistant' %}"
    "<|assistant|>{% generation %}{{ message['content'] }}<|end|>{% endgeneration %}"
    "{% else %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endif %}"
    "{% endfor %}"
    # A prompt for generation stops where the assistant starts; a whole conversation ends there.
    "{% if add_generation_prompt %}<|assistant|>{% else %}{{ eos_token }}{% endif %}"
)


@dataclass(frozen=True)
class ChatTokens:
    """The ids of the chat format's special tokens in one tokenizer."""

    system: int
    user: int
    assistant: int
    end: int  # "<|end|>": the end of a turn
    eos: int  # "<|endoftext|>": the end of a conversation, and the padding


def chat_tokens(tokenizer) -> ChatTokens:
    """The chat tokens' ids in a tokenizer that has them (see `add_chat_tokens`)."""
    ids = tokenizer.convert_tokens_to_ids(list(CHAT_SPECIAL_TOKENS))
    missing = [token for token, i in zip(CHAT_SPECIAL_TOKENS, ids, strict=True)
               if i is None or i == tokenizer.unk_token_id]
    if missing or tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer lacks {missing or 'an eos token'}: call "
                         "add_chat_tokens(tokenizer) first")
    return ChatTokens(*ids, eos=tokenizer.eos_token_id)


def add_chat_tokens(tokenizer) -> ChatTokens:
    """Give `tokenizer` the chat format: its four special tokens (each one id, never split or
    merged with the text around it) and the chat template. Changes `tokenizer` in place; a second
    call changes nothing.

    The model needs a row of embeddings for each new id: `model.resize_token_embeddings(
    len(tokenizer))`. transformers (5.x) starts the new rows at the mean of the old ones (drawn
    from a normal with the old rows' mean and a covariance scaled by 1e-9: `mean_resizing`), so a
    new token starts as an average token, neither favoured nor shunned by the output layer, until
    fine-tuning gives it a meaning. GPT-2 ties its output layer to the embeddings, so both grow.
    """
    tokenizer.add_special_tokens({"additional_special_tokens": list(CHAT_SPECIAL_TOKENS)})
    tokenizer.chat_template = CHAT_TEMPLATE
    return chat_tokens(tokenizer)


def task_conversation(items: Sequence[TaskItem], system: str | None = None) -> list[dict]:
    """A conversation asking the items' prompts in turn, each answered by its answer: one turn per
    item, after the system message when there is one."""
    messages = [{"role": "system", "content": system}] if system is not None else []
    for item in items:
        messages += [{"role": "user", "content": item.prompt},
                     {"role": "assistant", "content": item.answer}]
    return messages


def pack_conversations(
    conversations: Sequence[Sequence[int]], length: int, pad_id: int
) -> np.ndarray:
    """Tokenized conversations (each ending with its eos) end to end in rows of `length` ids:
    (rows, length).

    A conversation that does not fit in what is left of a row fills it and is cut at the row's
    end; the rest of it is dropped, so every row starts where a conversation starts, and whose
    tokens a row holds can be read from the row alone. The last row is padded with `pad_id` on
    the right. (TRL's default packing, "bfd", moves a conversation that does not fit to a row
    with room instead, and cuts only one longer than a whole row.)
    """
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    rows, row = [], []
    for conversation in conversations:
        row.extend(conversation[: length - len(row)])
        if len(row) == length:
            rows.append(row)
            row = []
    if row:
        rows.append(row + [pad_id] * (length - len(row)))
    return np.array(rows, dtype=np.int64).reshape(len(rows), length)


def assistant_labels(ids, tokens: ChatTokens) -> torch.Tensor:
    """Labels for packed rows of ids (batch, length): each token the assistant writes (the content
    of its turns and the "<|end|>" closing each) keeps its id, every other token gets -100 (the
    loss skips it): the system and user messages, every role token, eos and padding. The labels
    are not shifted: a transformers model shifts them itself.

    A reply cut off by the row's end, by an eos or by the next message's role token ends there:
    the labels never run on into the next conversation. (TRL's padding-free batches put a
    conversation cut at max_length right before the next one, with no eos between them.)
    """
    ids = torch.as_tensor(ids)
    if ids.dim() != 2:
        raise ValueError(f"ids must be packed rows (batch, length), got shape {tuple(ids.shape)}")
    headers = (tokens.system, tokens.user, tokens.assistant)
    labels = []
    for row in ids.tolist():
        in_reply = False  # a row starts where a conversation starts, never inside a reply
        for token in row:
            if token in headers or token == tokens.eos:
                # A role token starts a message (the assistant's own is given, not learned);
                # an eos ends the conversation, whatever turn it cut.
                in_reply = token == tokens.assistant
                labels.append(IGNORE_INDEX)
            else:
                labels.append(token if in_reply else IGNORE_INDEX)
                in_reply = in_reply and token != tokens.end
    return torch.tensor(labels, dtype=torch.long).reshape(ids.shape)
