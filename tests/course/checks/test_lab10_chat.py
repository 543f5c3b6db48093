"""Lab 10's chat-labels check accepts right answers in their several forms and refuses likely
mistakes, each with a message that names it. (tests/course/checks/test_every_lab.py proves it
passes on the solution notebook and says "not done yet" on the generated stub, once the notebook
exists.)"""

import numpy as np
import pytest
import torch
from helpers.checks import BUG_NAMED, buggy, fails, stub

from llmlab.course.checks import lab10_chat as check
from llmlab.data.chat import assistant_labels

pytest.importorskip("trl")  # the check packs two of its batches with TRL (the course extra)
X = -100


def learner(ids, tokens, *, prompt=False, end=True, header=False, stops=("eos", "system", "user"),
            rows_apart=True, eos=False, shift=0, mark=False, form="tensor", in_place=False):
    """A learner's labels with one switch per likely mistake (defaults: a right answer).
    `stops`: the tokens besides <|end|> that end a reply."""
    ids = torch.as_tensor(ids)
    width, labels, in_reply = ids.shape[1], [], False
    stop_ids = [getattr(tokens, name) for name in stops]
    for index, token in enumerate(ids.flatten().tolist()):
        if rows_apart and index % width == 0:
            in_reply = False
        stopped = token in stop_ids
        if token == tokens.assistant:
            in_reply = True
            labels.append(token if header else X)
        elif in_reply and not stopped:
            labels.append(token if end or token != tokens.end else X)
            in_reply = token != tokens.end
        else:
            in_reply = False
            heard = token not in (tokens.eos, tokens.system, tokens.user)  # the prompt's words
            labels.append(token if (eos and token == tokens.eos) or (prompt and heard) else X)
    labels = torch.tensor(labels).view(ids.shape)
    if shift:
        labels = torch.roll(labels, -shift, dims=1)
        labels[:, -1 if shift > 0 else 0] = X
    if mark:
        labels = torch.where(labels != X, 1, X)
    if in_place:
        ids.copy_(labels)
        return ids
    return {"tensor": lambda: labels, "numpy": labels.numpy, "list": labels.tolist,
            "int32": lambda: labels.int(), "bool": lambda: labels != X,
            "float": lambda: labels.float()}[form]()


def whole_replies_only(ids, tokens):
    """Labels each <|assistant|> ... <|end|> pair: a reply cut before its <|end|> is skipped by the
    row's end, and runs on past an eos to the next conversation's <|end|>."""
    rows = []
    for row in torch.as_tensor(ids).tolist():
        labels = [X] * len(row)
        for start, token in enumerate(row):
            if token == tokens.assistant and tokens.end in row[start:]:
                stop = row.index(tokens.end, start)
                labels[start + 1 : stop + 1] = row[start + 1 : stop + 1]
        rows.append(labels)
    return rows


def vectorized(ids, tokens):
    """Another right form: no loop. A token is the assistant's when the last role token or eos
    before it is <|assistant|> and no <|end|> came between them."""
    ids = torch.as_tensor(ids)
    index = torch.arange(ids.shape[1]).expand_as(ids)
    starts = torch.isin(ids, torch.tensor([tokens.system, tokens.user, tokens.assistant,
                                           tokens.eos]))
    last_start = torch.where(starts, index, -1).cummax(dim=1).values
    ended = torch.where(ids == tokens.end, index, -1).cummax(dim=1).values
    last_end_before = torch.cat([torch.full_like(ended[:, :1], -1), ended[:, :-1]], dim=1)
    opened = ids.gather(1, last_start.clamp(min=0)) == tokens.assistant
    mine = (last_start >= 0) & opened & ~starts & (last_end_before < last_start)
    return np.where(mine.numpy(), ids.numpy(), -100)


@pytest.mark.parametrize("answer", [
    assistant_labels, learner, vectorized,
    lambda ids, tokens: learner(ids, tokens, stops=("eos",)),
    lambda ids, tokens: learner(ids, tokens, form="numpy"),
    lambda ids, tokens: learner(ids, tokens, form="list"),
    lambda ids, tokens: learner(ids, tokens, form="int32"),
], ids=["reference", "a loop", "vectorized", "ended by eos but not by a role token", "numpy",
        "lists", "int32"])
def test_the_check_accepts_right_labels_in_their_forms(answer, capsys):
    assert check.exercise_assistant_labels(answer) is answer
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, match", [
    ({"prompt": True}, "tokens of the system or user messages are labelled"),
    ({"end": False}, "the <|end|> closing a reply gets -100"),
    ({"header": True}, "role token <|assistant|> is labelled"),
    ({"stops": ()}, "runs on past it, into the next conversation"),
    ({"stops": ("eos",), "rows_apart": False}, "runs on into the next row"),
    ({"eos": True}, "an eos .* is labelled"),
    ({"shift": 1}, "one position off"),
    ({"shift": -1}, "one position off"),
    ({"mark": True}, "not a 1 or a mark"),
    ({"form": "bool"}, "a mask of True and False"),
    ({"form": "float"}, "make them integers"),
    ({"in_place": True}, "changed the ids it was given"),
], ids=lambda value: str(value) if isinstance(value, dict) else "")
def test_the_check_names_each_mistake(mistake, match):
    fails(check.exercise_assistant_labels, lambda ids, tokens: learner(ids, tokens, **mistake),
          match)


def test_a_reply_cut_by_the_row_end_must_still_be_learned():
    fails(check.exercise_assistant_labels, whole_replies_only, "is still the assistant's")


def test_the_message_shows_the_row_where_the_labels_differ():
    with pytest.raises(check.ExerciseFailed) as failure:
        check.exercise_assistant_labels(lambda ids, tokens: learner(ids, tokens, end=False))
    message = str(failure.value)
    assert "row 0 differs from position 10" in message
    lines = message.splitlines()
    ids_line = next(line for line in lines if line.strip().startswith("ids"))
    expected_line = next(line for line in lines if line.strip().startswith("expected"))
    assert "<|assistant|>" in ids_line and "<|end|>" in expected_line
    assert "def " not in message and "ExerciseFailed" not in message  # no checker source


def test_a_wrong_shape_is_named():
    fails(check.exercise_assistant_labels, lambda ids, tokens: learner(ids, tokens).flatten(),
          r"labels of shape \(\d+,\), expected the ids' shape \(")


def test_a_stub_lets_the_lab_go_on_with_llmlabs_version(capsys):
    assert check.exercise_assistant_labels(stub) is assistant_labels
    assert "not done yet" in capsys.readouterr().out


def test_a_bug_of_the_learners_own_is_named():
    fails(check.exercise_assistant_labels, buggy, BUG_NAMED)
