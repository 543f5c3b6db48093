"""Checks for Lab 10 (post-training), and the versions the lab falls back to.

Exercise 1: assistant_labels(ids, tokens) -> labels for packed rows of conversations, the
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

Exercise 2 (DPO's loss from per-token log-probabilities and the masks of the completions) and
Exercise 3 (GRPO's loss, its group advantages included) are checked against llmlab.posttrain,
whose losses are themselves checked against TRL's trainers. The inputs are random log-probs with
prompts and padding around each completion; the prompt's and the padding's positions hold
log-probs too (as a model gives them), so a mask left out shows. When an answer differs, the
check recomputes each likely mistake and names the one the answer matches.
"""

import math
import random
from collections.abc import Callable
from typing import NamedTuple

import torch

from llmlab.course.checks import (
    ExerciseFailed,
    call_or_fail,
    exercise,
    passed,
    real_number,
    tensor_of_shape,
)
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
from llmlab.posttrain import STD_EPSILON, dpo_loss, group_advantages, grpo_loss

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


_REL, _ABS = 1e-4, 1e-6  # float32 answers against float64 references


def _close(got: float, expected: float) -> bool:
    return math.isclose(got, expected, rel_tol=_REL, abs_tol=_ABS)


def _one_loss(name: str, call_text: str, got, count: int, per: str) -> float:
    """The learner's loss as a float: any real number, 0-d or one-element tensor or array; a
    failure that says what came back otherwise (`count` numbers: one per `per`, not averaged)."""
    number = real_number(got)
    if number is not None:
        return number
    try:
        values = torch.as_tensor(got).detach().double().flatten().tolist()
    except (TypeError, ValueError, RuntimeError):
        values = None
    if values is not None and len(values) == 1:
        return values[0]
    if values is not None and len(values) == count:
        raise ExerciseFailed(f"{name}: {call_text} returned {count} numbers, one per {per}: the "
                             "loss is one number, their mean.")
    raise ExerciseFailed(f"{name}: {call_text} returned {got!r} (a {type(got).__name__}); "
                         "return the loss: one number (a 0-d tensor or a float).")


def _not_finite(name: str, call_text: str, got: float, hint: str) -> None:
    if not math.isfinite(got):
        raise ExerciseFailed(f"{name}: {call_text} returned {got}. {hint}".strip())


# ---------------------------------------------------------------- Exercise 2: DPO's loss

_DPO = "Exercise 2 (DPO's loss)"


def _completion_sum(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(pairs,): the sum of each sequence's log-probs over its completion tokens."""
    return (logprobs * mask).sum(-1)


def dpo_loss_reference(policy_chosen, policy_rejected, reference_chosen, reference_rejected,
                       chosen_mask, rejected_mask, beta) -> torch.Tensor:
    """The lab's fallback for Exercise 2: DPO's loss (the mean over the pairs) from per-token
    log-probs (pairs, tokens) and masks (1 on the completion's tokens): llmlab.posttrain.dpo_loss
    on each completion's summed log-probs."""
    return dpo_loss(_completion_sum(policy_chosen, chosen_mask),
                    _completion_sum(policy_rejected, rejected_mask),
                    _completion_sum(reference_chosen, chosen_mask),
                    _completion_sum(reference_rejected, rejected_mask), beta).loss


class _Pairs(NamedTuple):
    policy_chosen: torch.Tensor
    policy_rejected: torch.Tensor
    reference_chosen: torch.Tensor
    reference_rejected: torch.Tensor
    chosen_mask: torch.Tensor
    rejected_mask: torch.Tensor
    beta: float


def _masks(generator, rows: int, width: int, prompts: torch.Tensor) -> torch.Tensor:
    """(rows, width) of 0/1 (int64, as attention masks come): a completion of 2 or more tokens
    after each row's prompt, then padding."""
    ends = prompts + torch.randint(2, width // 2, (rows,), generator=generator)
    positions = torch.arange(width)
    return ((positions >= prompts[:, None]) & (positions < ends[:, None])).long()


def _dpo_cases() -> list[_Pairs]:
    generator = torch.Generator().manual_seed(10)
    cases = []
    for pairs, width, beta in ((6, 16, 0.1), (5, 12, 0.5), (1, 10, 0.25)):
        prompts = torch.randint(1, width // 2, (pairs,), generator=generator)  # a pair's prompt
        reference_chosen, reference_rejected = -4 * torch.rand(2, pairs, width,
                                                               generator=generator)
        # The policy near its reference, as in training: margins of a few nats.
        policy_chosen, policy_rejected = (
            reference + 0.5 * torch.randn(pairs, width, generator=generator)
            for reference in (reference_chosen, reference_rejected))
        cases.append(_Pairs(policy_chosen, policy_rejected, reference_chosen, reference_rejected,
                            _masks(generator, pairs, width, prompts),
                            _masks(generator, pairs, width, prompts), beta))
    return cases


def _dpo_value(case: _Pairs, *, sums=_completion_sum, reference=True, swap=False, beta_inside=True,
               reduce="mean") -> float:
    """DPO's loss in float64 with one likely mistake, or none."""
    def total(name: str, mask) -> torch.Tensor:
        return sums(getattr(case, name).double(), mask.double())

    chosen = total("policy_chosen", case.chosen_mask)
    rejected = total("policy_rejected", case.rejected_mask)
    ref_chosen, ref_rejected = (total("reference_chosen", case.chosen_mask),
                                total("reference_rejected", case.rejected_mask))
    if not reference:
        ref_chosen, ref_rejected = torch.zeros_like(chosen), torch.zeros_like(rejected)
    if swap:
        chosen, rejected, ref_chosen, ref_rejected = rejected, chosen, ref_rejected, ref_chosen
    beta = case.beta if beta_inside else 1.0
    loss = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta).loss.item()
    loss *= 1.0 if beta_inside else case.beta
    return {"mean": loss, "sum": loss * len(chosen), "negated": -loss}[reduce]


def _dpo_mistakes(case: _Pairs) -> list[tuple[float, str]]:
    return [
        (_dpo_value(case, reference=False),
         "your loss does not change with the reference's log-probabilities: DPO's implicit "
         "reward is how much more likely the policy makes an answer than the frozen reference "
         "does, so both of the reference's log-probs belong in the margin."),
        (_dpo_value(case, sums=lambda logprobs, mask: logprobs.sum(-1)),
         "your log-probabilities include the prompt's and the padding's tokens: only the "
         "completion's tokens (where the mask is 1) make an answer's log-probability."),
        (_dpo_value(case, swap=True),
         "your loss falls when the rejected answer gains on the chosen one: the margin is "
         "taken the wrong way round."),
        (_dpo_value(case, sums=lambda logprobs, mask: (logprobs * mask).sum(-1) / mask.sum(-1)),
         "you averaged the log-probs over the completion's tokens: an answer's log-probability "
         "is that of all its tokens together, the log of a product."),
        (_dpo_value(case, beta_inside=False),
         "beta scales your loss from outside the log-sigmoid: it belongs inside, scaling the "
         "margin, where it sets how sharply a margin turns into a preference."),
        (_dpo_value(case, reduce="sum"),
         "your loss is the sum over the pairs: take their mean, so that the loss (and the "
         "learning rate that suits it) does not grow with the batch."),
        (_dpo_value(case, reduce="negated"),
         "your value is the log-likelihood of the preferences, which training raises: the loss "
         "an optimizer lowers is its negative."),
    ]


@exercise(fallback=dpo_loss_reference,
          fallback_name="llmlab.course.checks.lab10.dpo_loss_reference")
def exercise_dpo_loss(dpo_loss_fn) -> None:
    """Exercise 2: dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected,
    chosen_mask, rejected_mask, beta) -> the loss, from per-token log-probs (pairs, tokens) and
    masks of 1 on the completion's tokens, 0 on the prompt and the padding."""
    name = _DPO
    for case in _dpo_cases():
        pairs, width = case.chosen_mask.shape
        call_text = (f"dpo_loss(<per-token log-probs of {pairs} pair(s), {width} positions, "
                     f"prompt and padding around each completion>, beta={case.beta})")
        got = call_or_fail(name, call_text, dpo_loss_fn, *(t.clone() for t in case[:6]),
                           case.beta)
        value = _one_loss(name, call_text, got, pairs, "pair")
        _not_finite(name, call_text, value, "")
        expected = _dpo_value(case)
        if _close(value, expected):
            continue
        hint = next((text for wrong, text in _dpo_mistakes(case) if _close(value, wrong)),
                    "Try each step on one pair: each answer's log-probability (its completion's "
                    "tokens only), the margin against the reference, beta, the log-sigmoid, "
                    "then the mean over the pairs.")
        raise ExerciseFailed(f"{name}: {call_text} returned {value:.6g}; DPO's loss is "
                             f"{expected:.6g}. {hint}".strip())
    passed(name, "llmlab's DPO loss on random pairs with prompts and padding, three betas, "
                 "and a batch of one pair")


# ---------------------------------------------------------------- Exercise 3: GRPO's loss

_GRPO = "Exercise 3 (GRPO's loss)"


def grpo_loss_reference(logprobs, old_logprobs, reference_logprobs, rewards, mask, group_size,
                        epsilon, beta) -> torch.Tensor:
    """The lab's fallback for Exercise 3: GRPO's loss from per-token log-probs (completions,
    tokens), one reward per completion (groups of `group_size` consecutive completions) and the
    mask of the completions' tokens: llmlab.posttrain's group_advantages, then grpo_loss."""
    advantages = group_advantages(rewards, group_size).to(logprobs.dtype)
    return grpo_loss(logprobs, old_logprobs, reference_logprobs, advantages, mask, epsilon,
                     beta).loss


class _Rollouts(NamedTuple):
    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    reference_logprobs: torch.Tensor
    rewards: torch.Tensor
    mask: torch.Tensor
    group_size: int
    epsilon: float
    beta: float


def _grpo_cases() -> list[_Rollouts]:
    generator = torch.Generator().manual_seed(10)
    cases = []
    # Verifiable rewards (0 or 1, one group all right: its spread is 0), then graded ones.
    for groups, group_size, width, epsilon, beta, graded in ((3, 4, 10, 0.2, 0.04, False),
                                                            (2, 5, 8, 0.1, 0.2, True)):
        rows = groups * group_size
        logprobs = -3 * torch.rand(rows, width, generator=generator)
        # The sampling policy and the reference near the policy: some ratios beyond the clip.
        old = logprobs + 0.3 * torch.randn(rows, width, generator=generator)
        reference = logprobs + 0.3 * torch.randn(rows, width, generator=generator)
        lengths = torch.randint(3, width + 1, (rows,), generator=generator)
        mask = (torch.arange(width) < lengths[:, None]).long()  # the completion, then padding
        if graded:
            rewards = 2 * torch.randn(rows, generator=generator) + 1
        else:
            rewards = torch.randint(0, 2, (rows,), generator=generator).float()
            rewards[:group_size] = 1.0
        cases.append(_Rollouts(logprobs, old, reference, rewards, mask, group_size, epsilon,
                               beta))
    return cases


def _grpo_value(case: _Rollouts, *, ddof=1, std_epsilon=STD_EPSILON, centre="group",
                spread="group", clip=True, pick=torch.minimum, policy_sign=-1.0,
                old="old", kl="k3", kl_sign=1.0, average="sequence", negated=False) -> float:
    """GRPO's loss in float64 with one likely mistake, or none (ddof and std_epsilon: the right
    forms of the groups' standard deviation)."""
    logprobs, reference = case.logprobs.double(), case.reference_logprobs.double()
    mask = case.mask.double()
    groups = case.rewards.double().view(-1, case.group_size)
    means = {"group": groups.mean(1, keepdim=True), "batch": groups.mean()}
    stds = {"group": groups.std(1, keepdim=True, correction=ddof),
            "batch": groups.std(correction=ddof), "none": None}
    advantages = groups - means[centre]
    if stds[spread] is not None:
        advantages = advantages / (stds[spread] + std_epsilon)
    advantages = advantages.flatten()[:, None]
    ratio = torch.exp(logprobs - (case.old_logprobs.double() if old == "old" else reference))
    clipped = torch.clamp(ratio, 1 - case.epsilon, 1 + case.epsilon) if clip else ratio
    log_ratio = reference - logprobs if kl == "k3" else logprobs - reference
    per_token = (policy_sign * pick(ratio * advantages, clipped * advantages)
                 + kl_sign * case.beta * (torch.exp(log_ratio) - log_ratio - 1))
    width = mask.shape[1]
    loss = {"sequence": lambda: ((per_token * mask).sum(-1) / mask.sum(-1)).mean(),
            "padding": lambda: ((per_token * mask).sum(-1) / width).mean(),
            "everything": lambda: per_token.mean(),
            "tokens": lambda: (per_token * mask).sum() / mask.sum()}[average]().item()
    return -loss if negated else loss


def _grpo_right(case: _Rollouts, value: float) -> bool:
    """Whether `value` is GRPO's loss with the groups' standard deviation taken either way (n
    or n - 1) and any small constant up to TRL's added to it."""
    for ddof in (0, 1):
        low, high = sorted(_grpo_value(case, ddof=ddof, std_epsilon=e) for e in (1e-8, STD_EPSILON))
        tolerance = _ABS + _REL * max(abs(low), abs(high))
        if low - tolerance <= value <= high + tolerance:
            return True
    return False


_PADDING = ("your mean over each completion's tokens counts the padding: divide each "
            "completion's sum by its own number of tokens, where the mask is 1.")
_GRPO_MISTAKES = [
    (dict(spread="none"),
     "your advantages are not divided by their group's spread (standard deviation): GRPO scales "
     "each group so that every prompt pushes with the same strength, whatever its rewards' "
     "scale."),
    (dict(centre="batch", spread="batch"),
     "your advantages are normalised over the whole batch: GRPO compares each completion with "
     "the other completions of its own prompt (group_size consecutive ones), so that an easy "
     "prompt's completions are not all better than average."),
    (dict(spread="batch"),
     "your advantages are centred on their group but divided by the whole batch's spread: "
     "GRPO divides each group by its own."),
    (dict(clip=False),
     "your ratio is never clipped: then one step can move a token's probability as far as its "
     "advantage pushes it. The clip keeps it within epsilon of the policy that sampled it."),
    (dict(pick=torch.maximum),
     "you keep the larger of the clipped and the unclipped term: the objective keeps the more "
     "pessimistic one, so that clipping can only take an incentive away, never add one."),
    (dict(average="padding"), _PADDING),
    (dict(average="everything"),
     "your mean over the tokens takes in the padding's positions (and their values): only the "
     "tokens where the mask is 1 belong to a completion."),
    (dict(average="tokens"),
     "you averaged over all the completion tokens of the batch at once (the token-level mean "
     "of DAPO): GRPO averages over each completion's own tokens first, then over the "
     "completions, so that each completion counts the same."),
    (dict(kl_sign=0.0),
     "your loss has no KL term: with beta above 0, beta times the estimate of the KL "
     "divergence to the reference is added to every token's loss, to keep the policy near it."),
    (dict(kl_sign=-1.0),
     "your KL term has the wrong sign: subtracted, it rewards drifting away from the "
     "reference instead of holding the policy near it."),
    (dict(kl="reversed"),
     "your KL estimate has its log-ratio the wrong way round: the estimator of KL(policy || "
     "reference) exponentiates the reference's log-prob minus the policy's."),
    (dict(old="reference"),
     "your ratio compares the policy with the reference: the clipped ratio is to the policy "
     "that sampled the completions (old_logprobs); the reference enters only the KL term."),
    (dict(policy_sign=1.0),
     "your policy term has the wrong sign: lowering your loss would make the completions that "
     "beat their group less likely, and those that fell short more likely."),
    (dict(negated=True),
     "your value is the objective with its sign flipped: you returned what training "
     "maximises; an optimizer minimises, so return its negative."),
]


def _grpo_hint(case: _Rollouts, value: float) -> str:
    for switches, text in _GRPO_MISTAKES:
        if any(_close(value, _grpo_value(case, ddof=ddof, **switches)) for ddof in (0, 1)):
            return text
    return ("Try each step on one group: the advantages (mean 0 and spread 1 within the group), "
            "the ratio and its clip, the KL term, the mean over each completion's tokens, then "
            "over the completions.")


@exercise(fallback=grpo_loss_reference,
          fallback_name="llmlab.course.checks.lab10.grpo_loss_reference")
def exercise_grpo_loss(grpo_loss_fn) -> None:
    """Exercise 3: grpo_loss(logprobs, old_logprobs, reference_logprobs, rewards, mask,
    group_size, epsilon, beta) -> the loss, from per-token log-probs (completions, tokens), one
    reward per completion (groups of group_size consecutive completions) and the mask (1 on the
    completion's tokens, 0 on the padding)."""
    name = _GRPO
    for case in _grpo_cases():
        rows, width = case.mask.shape
        call_text = (f"grpo_loss(<per-token log-probs of {rows} completions, {width} positions, "
                     f"padding after the shorter ones>, rewards={case.rewards.tolist()}, "
                     f"group_size={case.group_size}, epsilon={case.epsilon}, beta={case.beta})")
        got = call_or_fail(name, call_text, grpo_loss_fn, *(t.clone() for t in case[:5]),
                           case.group_size, case.epsilon, case.beta)
        value = _one_loss(name, call_text, got, rows, "completion")
        equal_group = bool((case.rewards.view(-1, case.group_size).std(1) == 0).any())
        _not_finite(name, call_text, value,
                    "A group whose completions all earned the same reward has a spread of 0: "
                    "what keeps its advantages finite (they should be 0)?" if equal_group else "")
        if _grpo_right(case, value):
            continue
        expected = grpo_loss_reference(*(t.double() for t in case[:5]), case.group_size,
                                       case.epsilon, case.beta).item()
        raise ExerciseFailed(f"{name}: {call_text} returned {value:.6g}; GRPO's loss is "
                             f"{expected:.6g}. {_grpo_hint(case, value)}".strip())
    passed(name, "llmlab's GRPO loss on groups of 0/1 rewards (one group all right) and of "
                 "graded rewards, with padding after the shorter completions")


NOTEBOOK = "10_post_training.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "assistant_labels": exercise_assistant_labels,
    "dpo_loss": exercise_dpo_loss,
    "grpo_loss": exercise_grpo_loss,
}
