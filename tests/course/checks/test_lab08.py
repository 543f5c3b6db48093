"""Lab 08's checks accept correct answers in their several forms and reject likely mistakes, each
with a message that names it. (tests/course/checks/test_every_lab.py proves they pass on the
solution notebook and say "not done yet" on the generated stub.)"""

import math
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.checks import BUG_NAMED, buggy, fails, stub
from torch import nn

from llmlab.course.checks import lab08 as check
from llmlab.data.augment import augment_by_back_translation, back_translate, extra_targets
from llmlab.train.lora import LoRALinear

# ---------------------------------------------------------------- Exercise 2: a LoRA layer


def lora_class(*, scaling="alpha/rank", b_random=False, a_zero=False, freeze=True,
               merge_scaled=True, merge_stops_update=True, transposed=False,
               detach=False):
    """A learner's LoRA layer with one switch per likely mistake (defaults: a correct one)."""

    class Layer(nn.Module):
        def __init__(self, base, rank, alpha):
            super().__init__()
            self.base = base
            if freeze:
                base.requires_grad_(False)
            self.scaling = {"alpha/rank": alpha / rank, "rank/alpha": rank / alpha,
                            "alpha//rank": alpha // rank, "none": 1.0}[scaling]
            a = torch.zeros(rank, base.in_features)
            if not a_zero:
                nn.init.kaiming_uniform_(a, a=math.sqrt(5))
            b = torch.randn(base.out_features, rank) if b_random else torch.zeros(
                base.out_features, rank)
            self.lora_A = nn.Parameter(a.t().contiguous() if transposed else a)
            self.lora_B = nn.Parameter(b.t().contiguous() if transposed else b)
            self.merged = False

        def delta(self):
            a = self.lora_A.t() if transposed else self.lora_A
            b = self.lora_B.t() if transposed else self.lora_B
            return b @ a

        def forward(self, x):
            out = self.base(x)
            if self.merged and merge_stops_update:
                return out
            delta = self.delta().detach() if detach else self.delta()
            return out + x @ delta.t() * self.scaling

        @torch.no_grad()
        def merge(self):
            self.base.weight += self.delta() * (self.scaling if merge_scaled else 1.0)
            self.merged = True

        @torch.no_grad()
        def unmerge(self):
            self.base.weight -= self.delta() * (self.scaling if merge_scaled else 1.0)
            self.merged = False

    return Layer


class LinearModules(nn.Module):
    """Another correct form: A and B as nn.Linear modules (as peft and llmlab keep them)."""

    def __init__(self, base, rank, alpha):
        super().__init__()
        self.inner = LoRALinear(base, rank, alpha)
        self.lora_A, self.lora_B = self.inner.lora_A, self.inner.lora_B

    def forward(self, x):
        return self.inner(x)

    def merge(self):
        self.inner.merge()

    def unmerge(self):
        self.inner.unmerge()


def test_lora_accepts_right_answers_in_their_forms(capsys):
    for answer in (lora_class(), lora_class(transposed=True), LinearModules, LoRALinear):
        assert check.exercise_lora_linear(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == 4


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(scaling="rank/alpha"), "scaled by rank / alpha"),
        (dict(scaling="none"), "is not scaled"),
        (dict(scaling="alpha//rank"), "integer division"),
        (dict(b_random=True), "differs from the frozen layer's"),
        (dict(a_zero=True), "A starts at zero as well"),
        (dict(a_zero=True, b_random=True), "peft zeroes B and draws A at random"),
        (dict(freeze=False), "still requires a gradient"),
        (dict(merge_scaled=False), "without its alpha / rank scaling"),
        (dict(merge_stops_update=False), "counts twice"),
        (dict(detach=True), "no gradient reaches them"),
    ],
)
def test_lora_rejects_likely_mistakes(switch, match):
    fails(check.exercise_lora_linear, lora_class(**switch), match)


def test_lora_rejects_missing_or_misshapen_adapters():
    class NoAdapters(nn.Module):
        def __init__(self, base, rank, alpha):
            super().__init__()
            self.base = base

    fails(check.exercise_lora_linear, NoAdapters, "no attribute lora_A")

    class WrongRank(nn.Module):
        def __init__(self, base, rank, alpha):
            super().__init__()
            self.lora_A = nn.Parameter(torch.zeros(rank + 1, base.in_features))

    fails(check.exercise_lora_linear, WrongRank, "lora_A has shape")


def test_lora_on_the_stub_returns_llmlab_s_layer(capsys):
    assert check.exercise_lora_linear(stub) is LoRALinear
    assert "not done yet" in capsys.readouterr().out


# ---------------------------------------------------------------- Exercise 1: corpus BLEU


def bleu(hypotheses, references, *, clip=True, brevity=True, geometric=True, smooth=True,
         corpus=True, scale=100.0, brevity_always=False, drop_empty_orders=False):
    """A learner's BLEU with one switch per likely mistake (defaults: a correct one)."""
    if not corpus:
        pairs = zip(hypotheses, references, strict=True)
        scores = [bleu([h], [r], clip=clip, brevity=brevity, geometric=geometric, smooth=smooth)
                  for h, r in pairs]
        return sum(scores) / len(scores) * scale / 100
    matches, totals = [0] * 4, [0] * 4
    c = sum(map(len, hypotheses))
    r = sum(map(len, references))
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        for n in range(1, 5):
            guessed = Counter(tuple(hypothesis[i : i + n]) for i in range(len(hypothesis) - n + 1))
            wanted = Counter(tuple(reference[i : i + n]) for i in range(len(reference) - n + 1))
            for gram, count in guessed.items():
                matches[n - 1] += min(count, wanted[gram]) if clip else count * (gram in wanted)
            totals[n - 1] += sum(guessed.values())
    if c == 0 or matches[0] == 0:
        return 0.0
    precisions, halvings = [], 0
    for matched, total in zip(matches, totals, strict=True):
        if total == 0 and drop_empty_orders:
            continue
        if total == 0:
            return 0.0
        if matched == 0 and smooth:
            halvings += 1
            precisions.append(1 / (2**halvings * total))
        else:
            precisions.append(matched / total)
    if geometric:
        if min(precisions) == 0:
            return 0.0
        mean = math.exp(sum(map(math.log, precisions)) / len(precisions))
    else:
        mean = sum(precisions) / len(precisions)
    penalty = math.exp(1 - r / c) if brevity and (c < r or brevity_always) else 1.0
    return scale * penalty * mean


def test_bleu_accepts_right_answers(capsys):
    for answer in (bleu, check.bleu_reference, check.sacrebleu_bleu):
        assert check.exercise_bleu(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == 3


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(clip=False), "not clipped"),
        (dict(brevity=False), "no brevity penalty"),
        (dict(geometric=False), "averaged the four precisions arithmetically"),
        (dict(smooth=False), "BLEU without smoothing"),
        (dict(corpus=False), "averaged sentence scores"),
        (dict(scale=1.0), "0-1 scale"),
        (dict(brevity_always=True), "longer than their references"),
        (dict(drop_empty_orders=True), "too short to hold a 4-gram"),
    ],
)
def test_bleu_rejects_likely_mistakes(switch, match):
    fails(check.exercise_bleu, lambda h, r: bleu(h, r, **switch), match)


def test_bleu_names_an_inverted_brevity_penalty_and_a_division_by_zero():
    def inverted(h, r):
        c, length = sum(map(len, h)), sum(map(len, r))
        right = bleu(h, r)
        return right if not c or c >= length else right * math.exp(1 - c / length) / math.exp(
            1 - length / c)

    fails(check.exercise_bleu, inverted, "the wrong way round")

    def divides(h, r):
        return bleu(h, r) * sum(map(len, r)) / sum(map(len, h))  # wrong anyway; fails on empty

    fails(check.exercise_bleu, divides, "")

    def no_guard(h, r):
        sum(len(x) for x in r) / min(len(x) for x in h)  # an unguarded length ratio
        return bleu(h, r)

    fails(check.exercise_bleu, no_guard, "divided by zero")


def test_bleu_rejects_a_non_number():
    fails(check.exercise_bleu, lambda h, r: str(bleu(h, r)), "return a number")


def test_bleu_on_the_stub_returns_the_fallback(capsys):
    assert check.exercise_bleu(stub) is check.bleu_reference
    assert "not done yet" in capsys.readouterr().out


def test_the_bleu_cases_hold_the_edge_cases_the_mistakes_need():
    cases = {what: (h, r) for what, h, r in check._bleu_cases()}
    h, _ = cases["an empty hypothesis beside a good one"]
    assert [] in h
    h, r = cases["no 4-gram match"]
    assert check.bleu_reference(h, r) > 0  # smoothing keeps it above 0 ...
    assert bleu(h, r, smooth=False) == 0  # ... where no smoothing gives 0
    h, r = cases["hypotheses shorter than their references"]
    assert sum(map(len, h)) < sum(map(len, r))
    h, r = cases["hypotheses longer than their references"]
    assert sum(map(len, h)) > sum(map(len, r))
    h, r = cases["hypotheses of fewer than 4 words"]
    assert all(0 < len(hypothesis) < 4 for hypothesis in h)


# ---------------------------------------------------------------- Exercise 3: the paired bootstrap


def paired_bootstrap(metric, outputs_a, outputs_b, references, draws, *, flip=False,
                     tails="both", shifted=False, paired=True, per_sentence=False, normal=False,
                     one_system=False, method="linear", form=tuple):
    """A learner's paired bootstrap with one switch per likely mistake (defaults: a correct one)."""

    def score(outputs, rows):
        if per_sentence:
            return np.mean([metric([outputs[i]], [references[i]]) for i in rows])
        return metric([outputs[i] for i in rows], [references[i] for i in rows])

    rows_of_b = draws if paired else np.random.default_rng(0).permutation(draws)
    scores_a = np.array([score(outputs_a, rows) for rows in draws])
    scores_b = np.array([score(outputs_b, rows) for rows in rows_of_b])
    d = scores_a - scores_b if flip else scores_b - scores_a
    low, high = np.percentile(scores_b if one_system else d, [2.5, 97.5], method=method)
    if normal:
        low, high = d.mean() - 1.96 * d.std(), d.mean() + 1.96 * d.std()
    below, above = np.mean(d <= 0), np.mean(d >= 0)
    p = {"both": min(1.0, 2 * min(below, above)), "one": min(below, above),
         "b better": min(1.0, 2 * below), "uncapped": 2 * min(below, above),
         "strict": min(1.0, 2 * min(np.mean(d < 0), np.mean(d > 0))),
         "plus one": min(1.0, 2 * (min(np.sum(d <= 0), np.sum(d >= 0)) + 1) / (len(d) + 1))}[tails]
    if shifted:
        observed = metric(outputs_b, references) - metric(outputs_a, references)
        p = (np.sum(np.abs(d - d.mean()) >= abs(observed)) + 1) / (len(d) + 1)
    return form([low, high, p])


def by_hand(metric, outputs_a, outputs_b, references, draws):
    """Another right answer: numpy arrays of outputs, the k-th smallest and largest differences."""
    outputs_a, outputs_b, references = map(np.asarray, (outputs_a, outputs_b, references))
    d = np.sort([metric(outputs_b[rows], references[rows]) - metric(outputs_a[rows],
                                                                    references[rows])
                 for rows in draws])
    k = math.ceil(round(0.025 * len(d), 9))
    return d[k - 1], d[-k], 2 * min(np.mean(d <= 0), np.mean(d >= 0), 0.5)  # 0.5: p at most 1


def test_paired_bootstrap_accepts_right_answers_in_their_forms(capsys):
    answers = [
        paired_bootstrap,
        check.paired_bootstrap_reference,
        by_hand,
        lambda *args: paired_bootstrap(*args, form=list),
        lambda *args: paired_bootstrap(*args, form=np.array),
        lambda *args: paired_bootstrap(*args, form=torch.tensor),  # float64
        lambda *args: paired_bootstrap(*args, form=lambda v: torch.tensor(v, dtype=torch.float32)),
        lambda *args: paired_bootstrap(*args, form=lambda v: tuple(map(torch.tensor, v))),
        *[lambda *args, m=method: paired_bootstrap(*args, method=m)
          for method in ("inverted_cdf", "hazen", "weibull", "median_unbiased", "lower",
                         "higher", "nearest", "midpoint")],
    ]
    for answer in answers:
        assert check.exercise_paired_bootstrap(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == len(answers)


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(flip=True), "taken the wrong way round"),
        (dict(tails="one"), "one tail of the draws only"),
        (dict(tails="b better"), "one fixed side of 0"),
        (dict(tails="uncapped"), "above 1"),
        (dict(tails="strict"), "exactly 0"),
        (dict(tails="plus one"), "adds one to the draws it counts"),
        (dict(shifted=True), "shifted to mean zero"),
        (dict(paired=False), "not paired"),
        (dict(per_sentence=True), "means of per-sentence scores"),
        (dict(normal=True), "normal approximation"),
        (dict(one_system=True), "one system's scores alone"),
    ],
)
def test_paired_bootstrap_rejects_likely_mistakes(switch, match):
    fails(check.exercise_paired_bootstrap, lambda *args: paired_bootstrap(*args, **switch), match)


def test_paired_bootstrap_rejects_what_is_not_three_numbers():
    fails(check.exercise_paired_bootstrap, lambda *args: paired_bootstrap(*args)[:2],
          r"return three numbers: \(low, high, p_value\)")
    fails(check.exercise_paired_bootstrap, lambda *args: {"p": paired_bootstrap(*args)[2]},
          "return three numbers")


def test_paired_bootstrap_on_the_stub_returns_the_fallback(capsys):
    assert check.exercise_paired_bootstrap(stub) is check.paired_bootstrap_reference
    assert "not done yet" in capsys.readouterr().out


def test_the_paired_cases_hold_what_the_mistakes_need():
    cases = {what: (metric, a, b, refs, draws) for what, metric, a, b, refs, draws
             in check._paired_cases()}
    metric, a, b, refs, _ = cases["40 sentences, b better"]
    sentence_mean = np.mean([metric([h], [r]) for h, r in zip(b, refs, strict=True)])
    assert not math.isclose(metric(b, refs), sentence_mean)  # not a mean of sentence scores
    assert metric(b, refs) > metric(a, refs)
    metric, a, b, refs, _ = cases["25 sentences, a better"]
    assert metric(a, refs) > metric(b, refs)  # a one-sided test looks at the wrong side here
    assert cases["identical systems"][1] == cases["identical systems"][2]
    metric, a, b, refs, draws = cases["b far better"]
    assert check.paired_bootstrap_reference(metric, a, b, refs, draws)[2] == 0
    assert cases["3 sentences"][4].shape[1] == 3


def test_the_lab_pins_the_cpu_threads_before_it_computes_anything():
    """Its fine-tunes and greedy summaries must not depend on the learner's cores (a `make
    course` run with all its threads scored LoRA 1.1 BLEU where the one-thread run gave 0.83)."""
    import nbformat

    notebook = Path(__file__).resolve().parents[3] / "solutions" / "08_finetuning.ipynb"
    cells = [c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    setup = next(source for source in cells if "trained_model(" in source)  # the first model
    assert "pin_cpu_threads(DEVICE" in setup
    assert setup.index("pin_cpu_threads(DEVICE") < setup.index("trained_model(")


@pytest.mark.parametrize("exercise", list(check.EXERCISES.values()),
                         ids=list(check.EXERCISES))
def test_an_error_in_an_answer_is_named_with_its_input(exercise):
    fails(exercise, buggy, BUG_NAMED)


def test_lora_an_error_in_forward_or_merge_is_named_with_the_call():
    class ForwardBug(lora_class()):
        def forward(self, x):
            return buggy(x)

    fails(check.exercise_lora_linear, ForwardBug, r"forward on x of shape \(2, 3, 12\)" + BUG_NAMED)

    class MergeBug(lora_class()):
        def merge(self):
            buggy()

    fails(check.exercise_lora_linear, MergeBug, r"alpha=8\): merge\(\)" + BUG_NAMED)


# -------------------------------------------------------------- Exercise 4: back-translation's loop


def back_translation(*, leak=False, inverted=False, ratio_of="real", drop_real=False):
    """augment_by_back_translation, right or with one named mistake."""

    def augment(real, pool, avoid, translate_back, keep, ratio, rng):
        pool = list(pool)
        targets = [i.answer for i in pool] if leak else extra_targets(pool, avoid)
        rule = (lambda s, t: not keep(s, t)) if inverted else keep
        synthetic, _ = back_translate(targets, translate_back, rule)
        count = round(ratio * len(real)) if ratio_of == "real" else round(len(real) / ratio)
        chosen = random.Random(0).sample(synthetic, min(count, len(synthetic)))
        return (list(real)[1:] if drop_real else list(real)) + chosen

    return augment


def test_back_translation_check_passes_on_the_reference(capsys):
    check.exercise_back_translation(augment_by_back_translation)
    check.exercise_back_translation(back_translation())  # another order of the same pairs
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("switch, match", [
    ({"leak": True}, "test answer leaked"),
    ({"inverted": True}, "the right way round"),
    ({"ratio_of": "inverted"}, "synthetic pairs per real pair"),
    ({"drop_real": True}, "every real pair exactly once"),
])
def test_back_translation_check_names_the_mistake(switch, match):
    fails(check.exercise_back_translation, back_translation(**switch), match)


def test_back_translation_check_names_a_bug_and_a_stub(capsys):
    fails(check.exercise_back_translation, buggy, BUG_NAMED)
    # The lab's next cell calls it: a learner who skipped the exercise goes on with llmlab's loop.
    assert check.exercise_back_translation(stub) is augment_by_back_translation
    assert "NOT DONE" in capsys.readouterr().out
