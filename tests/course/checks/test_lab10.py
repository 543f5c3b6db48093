"""Lab 10's checks accept correct answers in their several forms and reject likely mistakes, each
with a message that names it. (tests/course/checks/test_every_lab.py proves they pass on the
solution notebook and say "not done yet" on the generated stub, once the notebook is written.)"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers.checks import BUG_NAMED, buggy, fails, stub

from llmlab.course.checks import lab10 as check
from llmlab.data.chat import assistant_labels
from llmlab.posttrain import STD_EPSILON

pytest.importorskip("trl")  # exercise 1's check packs two batches with TRL (the course extra)

# ---------------------------------------------------------------- Exercise 1: assistant labels

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


# ---------------------------------------------------------------- Exercise 2: DPO's loss


def dpo(policy_chosen, policy_rejected, reference_chosen, reference_rejected, chosen_mask,
        rejected_mask, beta, *, masked=True, reference=True, flip=False, mean_tokens=False,
        beta_outside=False, reduce="mean", form="tensor"):
    """A learner's DPO loss with one switch per likely mistake (defaults: a correct one)."""

    def total(logprobs, mask):
        if not masked:
            return logprobs.sum(-1)
        summed = torch.where(mask.bool(), logprobs, 0.0).sum(-1)
        return summed / mask.sum(-1) if mean_tokens else summed

    chosen = total(policy_chosen, chosen_mask)
    rejected = total(policy_rejected, rejected_mask)
    if reference:
        chosen = chosen - total(reference_chosen, chosen_mask)
        rejected = rejected - total(reference_rejected, rejected_mask)
    margin = (rejected - chosen) if flip else (chosen - rejected)
    per_pair = (-beta * torch.log(torch.sigmoid(margin)) if beta_outside
                else -torch.log(torch.sigmoid(beta * margin)))
    loss = {"mean": per_pair.mean(), "sum": per_pair.sum(), "none": per_pair,
            "negated": -per_pair.mean()}[reduce]
    return as_form(loss, form)


def as_form(loss, form):
    """The loss as a learner may return it: a tensor, a float, a numpy value, a 1-element tensor."""
    if form == "float":
        return loss.item()
    if form == "numpy":
        return loss.detach().numpy()
    return loss.reshape(1) if form == "one-element" else loss


def softplus_dpo(pc, pr, rc, rr, cm, rm, beta):
    """Another correct form: -log sigmoid(x) written as softplus(-x), masks by multiplication."""
    margin = ((pc - rc) * cm).sum(1) - ((pr - rr) * rm).sum(1)
    return F.softplus(-beta * margin).mean()


@pytest.mark.parametrize("answer", [dpo, softplus_dpo, check.dpo_loss_reference,
                                    lambda *a: dpo(*a, form="float"),
                                    lambda *a: dpo(*a, form="numpy"),
                                    lambda *a: dpo(*a, form="one-element")])
def test_dpo_accepts_right_answers_in_their_forms(answer, capsys):
    assert check.exercise_dpo_loss(answer) is answer
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(reference=False), "does not change with the reference's log-probabilities"),
        (dict(masked=False), "include the prompt's and the padding's tokens"),
        (dict(flip=True), "margin is taken the wrong way round"),
        (dict(mean_tokens=True), "averaged the log-probs over the completion's tokens"),
        (dict(beta_outside=True), "beta scales your loss from outside the log-sigmoid"),
        (dict(reduce="sum"), "is the sum over the pairs"),
        (dict(reduce="negated"), "the loss an optimizer lowers is its negative"),
        (dict(reduce="none"), "6 numbers, one per pair"),
    ],
)
def test_dpo_rejects_likely_mistakes(switch, match):
    fails(check.exercise_dpo_loss, lambda *args: dpo(*args, **switch), match)


def test_dpo_names_the_input_and_the_expected_loss():
    with pytest.raises(check.ExerciseFailed, match=r"dpo_loss\(<per-token log-probs of 6 "
                       r"pair\(s\), 16 positions.*beta=0.1\) returned [-\d.]+; DPO's loss is"):
        check.exercise_dpo_loss(lambda *args: dpo(*args, flip=True))


def test_dpo_refuses_what_is_not_a_loss_and_names_a_bug_and_a_nan():
    fails(check.exercise_dpo_loss, lambda *args: "0.7", "return the loss: one number")
    fails(check.exercise_dpo_loss, lambda *args: torch.tensor(float("nan")), "returned nan")
    fails(check.exercise_dpo_loss, buggy, "beta=0.1\\)" + BUG_NAMED)


def test_dpo_on_the_stub_returns_llmlab_s_loss(capsys):
    assert check.exercise_dpo_loss(stub) is check.dpo_loss_reference
    assert "not done yet" in capsys.readouterr().out


# ---------------------------------------------------------------- Exercise 3: GRPO's loss


def grpo(logprobs, old_logprobs, reference_logprobs, rewards, mask, group_size, epsilon, beta, *,
         ddof=1, std_epsilon=STD_EPSILON, per_group=True, scale=True, spread_of="group",
         clip=True, pick=torch.min, kl_sign=1.0, kl_reversed=False, ratio_to_old=True,
         average="sequence", policy_sign=-1.0, negated=False, form="tensor"):
    """A learner's GRPO loss with one switch per likely mistake (defaults: a correct one)."""
    mask = mask.float()
    groups = rewards.view(-1, group_size) if per_group else rewards.view(1, -1)
    advantages = groups - groups.mean(1, keepdim=True)
    if scale:
        spread = (groups.std(1, keepdim=True, correction=ddof) if spread_of == "group"
                  else rewards.std(correction=ddof))
        advantages = advantages / (spread + std_epsilon)
    advantages = advantages.reshape(-1, 1)
    ratio = torch.exp(logprobs - (old_logprobs if ratio_to_old else reference_logprobs))
    bounded = torch.clamp(ratio, 1 - epsilon, 1 + epsilon) if clip else ratio
    log_ratio = (logprobs - reference_logprobs) if kl_reversed else (reference_logprobs - logprobs)
    kl = torch.exp(log_ratio) - log_ratio - 1
    per_token = policy_sign * pick(ratio * advantages, bounded * advantages) + kl_sign * beta * kl
    if average == "sequence":
        loss = ((per_token * mask).sum(1) / mask.sum(1)).mean()
    elif average == "padding":
        loss = ((per_token * mask).sum(1) / mask.shape[1]).mean()
    elif average == "everything":
        loss = per_token.mean()
    elif average == "tokens":
        loss = (per_token * mask).sum() / mask.sum()
    else:  # "none": the per-completion losses
        loss = (per_token * mask).sum(1) / mask.sum(1)
    loss = -loss if negated else loss
    return as_form(loss, form)


@pytest.mark.parametrize(
    "switch",
    [dict(), dict(ddof=0), dict(std_epsilon=1e-6), dict(ddof=0, std_epsilon=1e-8),
     dict(form="float"), dict(form="numpy")],
    ids=["TRL's", "population std", "epsilon 1e-6", "population std, epsilon 1e-8", "float",
         "numpy"],
)
def test_grpo_accepts_right_answers_in_their_forms(switch, capsys):
    def answer(*args):
        return grpo(*args, **switch)

    assert check.exercise_grpo_loss(answer) is answer
    assert "PASSED" in capsys.readouterr().out


def test_grpo_accepts_llmlab_s_loss(capsys):
    assert check.exercise_grpo_loss(check.grpo_loss_reference) is check.grpo_loss_reference
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(scale=False), "not divided by their group's spread"),
        (dict(per_group=False), "normalised over the whole batch"),
        (dict(spread_of="batch"), "divided by the whole batch's spread"),
        (dict(clip=False), "your ratio is never clipped"),
        (dict(pick=torch.max), "keep the larger of the clipped and the unclipped term"),
        (dict(average="padding"), "counts the padding"),
        (dict(average="everything"), "takes in the padding's positions"),
        (dict(average="tokens"), "all the completion tokens of the batch at once"),
        (dict(kl_sign=0.0), "your loss has no KL term"),
        (dict(kl_sign=-1.0), "KL term has the wrong sign"),
        (dict(kl_reversed=True), "log-ratio the wrong way round"),
        (dict(ratio_to_old=False), "your ratio compares the policy with the reference"),
        (dict(policy_sign=1.0), "policy term has the wrong sign"),
        (dict(negated=True), "the objective with its sign flipped"),
        (dict(ddof=0, clip=False), "your ratio is never clipped"),  # found with either std
        (dict(std_epsilon=0.0), "spread of 0: what keeps its advantages finite"),
        (dict(average="none"), "12 numbers, one per completion"),
    ],
)
def test_grpo_rejects_likely_mistakes(switch, match):
    fails(check.exercise_grpo_loss, lambda *args: grpo(*args, **switch), match)


def test_grpo_names_the_input_and_the_expected_loss():
    with pytest.raises(check.ExerciseFailed, match=r"grpo_loss\(<per-token log-probs of 12 "
                       r"completions.*group_size=4, epsilon=0.2, beta=0.04\) returned [-\d.]+; "
                       r"GRPO's loss is"):
        check.exercise_grpo_loss(lambda *args: grpo(*args, clip=False))


def test_grpo_names_a_bug_and_on_the_stub_returns_llmlab_s_loss(capsys):
    fails(check.exercise_grpo_loss, buggy, "beta=0.04\\)" + BUG_NAMED)
    assert check.exercise_grpo_loss(stub) is check.grpo_loss_reference
    assert "not done yet" in capsys.readouterr().out


def test_the_checks_right_value_is_llmlab_s_loss():
    """The check's own float64 loss, which names the mistakes, is llmlab's where none is made."""
    for case in check._grpo_cases():
        ours = check.grpo_loss_reference(*(t.double() for t in case[:5]), case.group_size,
                                         case.epsilon, case.beta).item()
        assert check._grpo_value(case) == pytest.approx(ours, rel=1e-12, abs=1e-12)
