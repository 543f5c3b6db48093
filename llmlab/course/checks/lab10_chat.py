"""Checks for Lab 10's supervised fine-tuning on chats, and the version the lab falls back to.

The exercise: assistant_labels(ids, tokens) -> labels for packed rows of conversations, the
assistant's tokens (its replies and the "<|end|>" closing each) kept and -100 everywhere else.
It is checked against TRL's labels on batches TRL packed itself (transformers' assistant mask
from the chat template, TRL's `pack_dataset` and collator), and against
llmlab.data.chat.assistant_labels (the same as TRL's, tests/data/test_chat.py) on random batches:
turns that vary, a system message sometimes, conversations cut at the row's end or cut inside a
reply and closed by eos, padding. Where the labels differ, the check names the mistake from where
they differ: the prompt trained on, the end of turn left out, the assistant's role token labelled,
a reply running on over a boundary, eos or padding labelled, labels shifted by one. No batch has
a cut reply followed at once by another conversation's role token, so a reply ended by its
<|end|>, an eos or the row's end is enough (llmlab's version ends one at a role token too).
"""

import random
from collections.abc import Callable

import torch

from llmlab.course.checks import ExerciseFailed, call_or_fail, exercise, passed, tensor_of_shape
from llmlab.data.chat import (
    ChatTokens,
    add_chat_tokens,
    assistant_labels,
    pack_conversations,
    task_conversation,
)
from llmlab.data.packing import IGNORE_INDEX
from llmlab.data.tasks import task_splits
from llmlab.data.tokenization import train_bpe

_LABELS = "Exercise 1 (assistant-only labels)"
# The ids the chat tokens get in the course's 2,048-token BPE tokenizer (add_chat_tokens).
_TOKENS = ChatTokens(system=2048, user=2049, assistant=2050, end=2051, eos=0)


# ---------------------------------------------------------------- the batches


def _conversation(rng: random.Random, tokens: ChatTokens, cut_short: bool = False) -> list[int]:
    """Random ids in the chat format: a system message sometimes, one to three turns (a reply
    may be empty), the eos last. `cut_short`: cut inside a reply and closed by eos, as a length
    limit applied before packing leaves a conversation."""
    def text(fewest: int) -> list[int]:
        return [rng.randrange(1, 2048) for _ in range(rng.randint(fewest, 4))]

    ids = [tokens.system, *text(1), tokens.end] if rng.random() < 0.4 else []
    replies = []
    for _ in range(rng.randint(1, 3)):
        ids += [tokens.user, *text(1), tokens.end, tokens.assistant]
        replies.append(len(ids))
        ids += [*text(0), tokens.end]
    if cut_short:
        start = rng.choice(replies)
        ids = ids[: rng.randint(start, ids.index(tokens.end, start))]
    return [*ids, tokens.eos]


def _random_batches() -> list[tuple[str, torch.Tensor, ChatTokens]]:
    rng = random.Random(10)
    batches = []
    for _ in range(8):
        conversations = [_conversation(rng, _TOKENS, cut_short=rng.random() < 0.25)
                         for _ in range(rng.randint(2, 8))]
        ids = pack_conversations(conversations, rng.randint(10, 24), _TOKENS.eos)
        batches.append(("random conversations packed into rows (some cut at a row's end or "
                        "inside a reply)", torch.as_tensor(ids), _TOKENS))
    return batches


def _hand_made_batches() -> list[tuple[str, torch.Tensor, ChatTokens]]:
    s, u, a, e, eos = (_TOKENS.system, _TOKENS.user, _TOKENS.assistant, _TOKENS.end,
                       _TOKENS.eos)
    return [
        ("two conversations, the second cut at the row's end, then a padded row", torch.tensor([
            [s, 11, e, u, 12, 13, e, a, 14, 15, e, eos, u, 16, e, a, 17, 18],
            [u, 19, e, a, 20, e, u, 21, e, a, 22, e, eos, eos, eos, eos, eos, eos]]), _TOKENS),
        ("a reply cut short by eos, the next conversation after it", torch.tensor([
            [u, 12, e, a, 14, 15, eos, u, 16, e, a, 17, e, eos]]), _TOKENS),
        ("edge cases: an empty reply, a row ending on the assistant's role token, no reply, "
         "padding", torch.tensor([
             [u, 12, e, a, e, eos, u, 13, e, a],
             [s, 11, e, u, 12, e, eos, eos, eos, eos],
             [eos, eos, eos, eos, eos, eos, eos, eos, eos, eos]]), _TOKENS),
    ]


def _trl_batches() -> list[tuple[str, torch.Tensor, ChatTokens, torch.Tensor]]:
    """Task conversations tokenized by a BPE tokenizer with the chat tokens, labelled by TRL's
    rule (transformers' assistant mask, as assistant_only_loss uses it) and packed and collated by
    TRL: once as one padding-free row, once as padded rows with a conversation too long for its
    row cut inside the reply. (ids, labels) come from TRL; the tokens' ids are not _TOKENS'."""
    # optional: imported only when checked (the lab imports TRL anyway)
    import datasets
    from trl import pack_dataset
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    items = task_splits("dates", {"train": 8}, seed=10)["train"]
    tokenizer = train_bpe([text for item in items for text in (item.prompt, item.answer)], 300)
    tokens = add_chat_tokens(tokenizer)
    conversations = [task_conversation(items[:1]), task_conversation(items[1:3], "Write it out."),
                     task_conversation(items[3:4]), task_conversation(items[4:7], "Be brief.")]
    rows = []
    for messages in conversations:
        encoded = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                                return_assistant_tokens_mask=True)
        rows.append({"input_ids": encoded["input_ids"],
                     "labels": [token if mask else IGNORE_INDEX for token, mask in
                                zip(encoded["input_ids"], encoded["assistant_masks"],
                                    strict=True)]})
    longest = max(len(row["input_ids"]) for row in rows)
    batches, bars_were_off = [], datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # a bar per tiny map would fill the check's output
    try:
        for seq_length, padding_free, what in (
                (longest, True, "TRL's packing ('bfd') and collator, padding-free: one row"),
                (longest - 6, False, "TRL's packing ('bfd') and collator, padded rows, the "
                                     "longest conversation cut inside its last reply")):
            packed = pack_dataset(datasets.Dataset.from_list(rows), seq_length, "bfd")
            batch = DataCollatorForLanguageModeling(pad_token_id=tokens.eos,
                                                    padding_free=padding_free)(list(packed))
            batches.append((what, batch["input_ids"], tokens, batch["labels"]))
    finally:
        if not bars_were_off:
            datasets.enable_progress_bars()
    return batches


# ---------------------------------------------------------------- reading the answer


def _as_labels(call_text: str, got, shape: tuple) -> torch.Tensor:
    """`got` (a tensor, a numpy array, nested lists) as an int64 tensor of `shape`, or a failure
    that says what labels are."""
    got = tensor_of_shape(_LABELS, call_text, got, shape, "labels", "the ids'")
    if got.dtype == torch.bool:
        raise ExerciseFailed(f"{_LABELS}: {call_text} returned a mask of True and False. Labels "
                             "hold the token's own id where the loss counts it and -100 where "
                             "it does not: how does torch.where build them from a mask?")
    if got.is_floating_point() or got.is_complex():
        raise ExerciseFailed(f"{_LABELS}: {call_text} returned {got.dtype} labels: make them "
                             "integers (int64). cross_entropy reads integer targets as class "
                             "indices, and floating-point ones as probabilities.")
    return got.long()


# ---------------------------------------------------------------- naming the mistake


def _ends_only_at_end(ids: torch.Tensor, tokens: ChatTokens, across_rows: bool,
                      at_eos: bool) -> torch.Tensor:
    """Where a mask that lets a reply end only at its "<|end|>" (also at eos when `at_eos`; the
    state carried from row to row when `across_rows`) labels tokens: the boundary-crossing
    mistake's positions."""
    marked = torch.zeros(ids.numel(), dtype=torch.bool)
    in_reply = False
    for index, token in enumerate(ids.flatten().tolist()):
        if index % ids.shape[1] == 0 and not across_rows:
            in_reply = False
        if token == tokens.assistant or (at_eos and token == tokens.eos):
            in_reply = token == tokens.assistant
        elif in_reply:
            marked[index] = True
            in_reply = token != tokens.end
    return marked.view(ids.shape)


def _hint(ids: torch.Tensor, tokens: ChatTokens, expected: torch.Tensor,
          got: torch.Tensor) -> str:
    want, have = expected != IGNORE_INDEX, got != IGNORE_INDEX
    kind = {name: ids == getattr(tokens, name) for name in ("system", "user", "assistant",
                                                            "end", "eos")}
    if want.any() and (torch.equal(have[:, :-1], want[:, 1:])
                       or torch.equal(have[:, 1:], want[:, :-1])):
        return ("your labels sit one position off the assistant's tokens. Do not shift them: "
                "the model shifts the labels itself (the logits at t are scored against the "
                "label at t + 1), so each token's label sits at its own position.")
    if torch.equal(have, want):
        if torch.equal(got[:, :-1][have[:, :-1]], ids[:, 1:][have[:, :-1]]):
            return ("each label is the next token's id. Do not shift them: the model shifts "
                    "the labels itself, so a token's label is its own id.")
        return ("the right tokens are labelled, with other values: a label is the token's own "
                "id (the class the model must predict there), not a 1 or a mark.")
    run_on_eos = _ends_only_at_end(ids, tokens, across_rows=False, at_eos=False) & ~want
    run_on_rows = _ends_only_at_end(ids, tokens, across_rows=True, at_eos=True) & ~want
    beyond = run_on_eos | run_on_rows | (
        _ends_only_at_end(ids, tokens, across_rows=True, at_eos=False) & ~want)
    if (have & kind["assistant"]).any():
        return ("the assistant's role token <|assistant|> is labelled. It is part of the "
                "prompt: the model is given it (generation starts after it), it never writes it.")
    if (want & kind["end"] & ~have).any():
        return ("the <|end|> closing a reply gets -100. It is the assistant's last token: a "
                "model never trained on it never learns to stop, and generation runs on.")
    if (have & ~want & ~kind["eos"] & ~beyond).any():
        return ("tokens of the system or user messages are labelled: that trains the model to "
                "write the prompt. Only what the assistant writes (after <|assistant|>, up to "
                "and with its <|end|>) is learned.")
    if (have & kind["eos"] & ~beyond).any():
        return ("an eos (a conversation's end, or padding) is labelled. The assistant ends its "
                "turn with <|end|>; eos and padding are nobody's words and get -100.")
    if (have & run_on_eos).any():
        return ("a reply cut short by an eos runs on past it, into the next conversation: eos "
                "ends the document, so a reply without its <|end|> ends there too.")
    if (have & run_on_rows).any():
        return ("a reply cut off by the row's end runs on into the next row: each row is "
                "labelled on its own, and the next row starts a new conversation.")
    if (want & ~have).any():
        return ("some tokens of the assistant's replies get -100. A reply cut off (by the row's "
                "end or an eos) before its <|end|> is still the assistant's: its tokens up to "
                "the cut are learned.")
    return ""


def _names(tokens: ChatTokens) -> dict[int, str]:
    return {tokens.system: "<|system|>", tokens.user: "<|user|>",
            tokens.assistant: "<|assistant|>", tokens.end: "<|end|>", tokens.eos: "eos"}


def _table(ids: torch.Tensor, tokens: ChatTokens, expected: torch.Tensor, got: torch.Tensor,
           row: int, column: int, width: int = 12) -> str:
    """The row around `column`: the ids (chat tokens by name) and both labels, aligned."""
    start = max(0, min(column - width // 2, ids.shape[1] - width))
    names = _names(tokens)
    lines = {"position": list(range(start, min(start + width, ids.shape[1])))}
    lines["ids"] = [names.get(int(ids[row, i]), str(int(ids[row, i]))) for i in lines["position"]]
    for label, values in (("expected", expected), ("got", got)):
        lines[label] = [names.get(int(values[row, i]), str(int(values[row, i])))
                        for i in lines["position"]]
    widths = [max(len(str(line[i])) for line in lines.values())
              for i in range(len(lines["position"]))]
    return "\n".join(f"  {label:<9}" + " ".join(f"{value!s:>{w}}" for value, w
                                                 in zip(values, widths, strict=True))
                     for label, values in lines.items())


def _compare(call_text: str, what: str, ids: torch.Tensor, tokens: ChatTokens,
             expected: torch.Tensor, got: torch.Tensor) -> None:
    got = got.clone()
    # A row's first label is never used (the model shifts it out): any value there is right.
    got[:, 0] = expected[:, 0]
    if torch.equal(got, expected):
        return
    row, column = (got != expected).nonzero()[0].tolist()
    raise ExerciseFailed(
        f"{_LABELS}: {call_text} on {what} (ids of shape {tuple(ids.shape)}): row {row} differs "
        f"from position {column} on (labels -100 where the loss skips a token; chat tokens "
        f"by name):\n{_table(ids, tokens, expected, got, row, column)}\n"
        f"{_hint(ids, tokens, expected, got)}".rstrip())


@exercise(fallback=assistant_labels, fallback_name="llmlab.data.chat.assistant_labels")
def exercise_assistant_labels(labels_fn: Callable) -> None:
    """Exercise 1: assistant_labels(ids, tokens) -> labels of the ids' shape (batch, length): the
    id of each token the assistant writes (its replies, and the <|end|> closing each), -100
    everywhere else; never across a document boundary (eos) or a row's end."""
    cases = [(what, ids, tokens, assistant_labels(ids, tokens))
             for what, ids, tokens in _hand_made_batches() + _random_batches()]
    for what, ids, tokens, expected in cases + _trl_batches():
        call_text = f"{getattr(labels_fn, '__name__', 'assistant_labels')}(ids, tokens)"
        given = ids.clone()
        got = call_or_fail(_LABELS, f"{call_text} on {what}", labels_fn, given, tokens)
        if not torch.equal(given, ids):
            raise ExerciseFailed(f"{_LABELS}: {call_text} on {what} changed the ids it was "
                                 "given. They are the batch's input_ids, still needed as the "
                                 "model's input: build the labels in a new tensor (clone).")
        got = _as_labels(f"{call_text} on {what}", got, tuple(ids.shape))
        _compare(call_text, what, ids, tokens, expected, got)
    passed(_LABELS, "TRL's labels on batches it packed (padding-free and padded), and random "
                    "packed conversations: system messages, several turns, replies cut by a "
                    "row's end or an eos, empty replies and padding")


NOTEBOOK = "10_post_training.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {"assistant_labels": exercise_assistant_labels}
