"""Checks for Lab 08 (fine-tuning and evaluation), and the versions the lab falls back to.

Exercise 2 (a LoRA layer) is checked against peft's own LoRA layer on the same base weights:
the start, the outputs with the same adapter values, the gradients, the merged weight and its
outputs, and the unmerge. Exercise 1 (corpus BLEU) is checked against sacrebleu on random
corpora and edge cases. When an answer differs, the check recomputes each likely mistake and
names the one the answer matches.
"""

import math

import torch
from torch import nn

from llmlab.course.checks import (
    ExerciseFailed,
    call,
    call_or_fail,
    exercise,
    expect_real,
    failure_from,
    passed,
)
from llmlab.evaluate.ngram_bleu import BleuCounts, bleu_from_counts, ngram_counts, sentence_counts
from llmlab.quant.library import import_gptqmodel
from llmlab.train.lora import LoRALinear

# ---------------------------------------------------------------- Exercise 2: a LoRA layer

_LORA = "Exercise 2 (a LoRA layer)"


def _peft_layer(base: nn.Linear, rank: int, alpha: float):
    """peft's LoRA layer around a copy of `base` (the reference the learner's layer must match)."""
    # peft imports GPTQModel when it is installed, and GPTQModel prints a banner as it loads:
    # importing it first, quietly, keeps the banner out of the exercise's output.
    import_gptqmodel(quiet=True)
    from peft import LoraConfig, get_peft_model  # optional: imported only when checked

    holder = nn.Sequential()
    holder.add_module("layer", _copy_linear(base))
    model = get_peft_model(holder, LoraConfig(r=rank, lora_alpha=alpha, target_modules=["layer"]))
    return model.base_model.model.layer


def _copy_linear(base: nn.Linear) -> nn.Linear:
    copy = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None)
    copy.load_state_dict(base.state_dict())
    return copy


def _matrix(name: str, holder, in_features: int, out_features: int, rank: int, which: str):
    """The learner's A (rank x in) or B (out x rank): a parameter, or a module with a weight,
    in either orientation. Returns (parameter, transposed)."""
    found = getattr(holder, f"lora_{which}", None)
    parameter = getattr(found, "weight", found)
    if not isinstance(parameter, torch.Tensor):
        raise ExerciseFailed(
            f"{name}: your layer has no attribute lora_{which} holding a tensor (or an "
            f"nn.Linear): name the two adapter matrices lora_A and lora_B."
        )
    want = (rank, in_features) if which == "A" else (out_features, rank)
    if tuple(parameter.shape) == want:
        return parameter, False
    if tuple(parameter.shape) == want[::-1]:
        return parameter, True
    raise ExerciseFailed(
        f"{name}: lora_{which} has shape {tuple(parameter.shape)}; with in_features="
        f"{in_features}, out_features={out_features} and rank={rank} it should be {want}."
    )


def _set(parameter: torch.Tensor, transposed: bool, value: torch.Tensor) -> None:
    with torch.no_grad():
        parameter.copy_(value.t() if transposed else value)


def _lora_mistake(got, base_out, update, rank: int, alpha: float) -> str:
    """Name the scaling the learner's output used (update = B A x, without any scaling)."""
    for factor, text in (
        (rank / alpha, "your correction is scaled by rank / alpha: the scaling is alpha / rank."),
        (1.0, "your correction B A x is not scaled: LoRA multiplies it by alpha / rank."),
        (alpha, "your correction is scaled by alpha alone: divide it by the rank too."),
        (alpha // rank, "your scaling alpha // rank is integer division: it rounds down "
         "whenever the rank does not divide alpha; LoRA's scaling is the exact ratio."),
        (1 / rank, "your correction is divided by the rank but not multiplied by alpha."),
    ):
        if torch.allclose(got, base_out + factor * update, rtol=1e-4, atol=1e-5):
            return text
    if torch.allclose(got, update * alpha / rank, rtol=1e-4, atol=1e-5):
        return "your output is the correction alone: the frozen layer's own output is missing."
    return ("your output is not base(x) + (alpha / rank) * B A x: compare yours with "
            "llmlab.train.lora.LoRALinear on a small input.")


@exercise(fallback=LoRALinear, fallback_name="llmlab.train.lora.LoRALinear")
def exercise_lora_linear(lora_class) -> None:
    """Exercise 2: lora_class(base: nn.Linear, rank, alpha) -> a module with lora_A, lora_B,
    forward, merge() and unmerge(), matching peft's LoRA layer on the same base."""
    name = _LORA
    generator = torch.Generator().manual_seed(8)
    # 10 / 4: an alpha the rank does not divide, so integer division (2) shows.
    for in_features, out_features, rank, alpha, bias in ((12, 10, 4, 8, True),
                                                         (16, 6, 2, 16, False),
                                                         (8, 5, 4, 10, True)):
        base = nn.Linear(in_features, out_features, bias=bias)
        with torch.no_grad():
            base.weight.copy_(torch.randn(out_features, in_features, generator=generator))
            if bias:
                base.bias.copy_(torch.randn(out_features, generator=generator))
        original = base.weight.detach().clone()
        call_text = (f"{lora_class.__name__}(<nn.Linear({in_features}, {out_features}, "
                     f"bias={bias})>, rank={rank}, alpha={alpha})")
        layer = call_or_fail(name, call_text, lora_class, base, rank, alpha)
        a, a_t = _matrix(name, layer, in_features, out_features, rank, "A")
        b, b_t = _matrix(name, layer, in_features, out_features, rank, "B")
        trainable = {id(p) for p in layer.parameters() if p.requires_grad}
        if id(a) not in trainable or id(b) not in trainable:
            raise ExerciseFailed(f"{name}: {call_text}: lora_A and lora_B must be trainable "
                                 "parameters (nn.Parameter, requires_grad=True) registered on "
                                 "the layer, or the optimizer never sees them.")
        if trainable != {id(a), id(b)}:
            raise ExerciseFailed(f"{name}: {call_text}: the base layer's weight or bias still "
                                 "requires a gradient. LoRA freezes the pretrained layer: only "
                                 "A and B train.")
        x = torch.randn(2, 3, in_features, generator=generator)
        forward = f"{call_text}, forward on x of shape {tuple(x.shape)}"
        with torch.no_grad():
            start, base_out = call_or_fail(name, forward, layer, x), base(x)
        if not torch.allclose(start, base_out, rtol=1e-5, atol=1e-6):
            raise ExerciseFailed(f"{name}: {call_text}: a new layer's output differs from the "
                                 "frozen layer's, so fine-tuning would start from a damaged "
                                 "model. Which of A and B starts at zero?")
        if not bool(a.detach().abs().sum() > 0) and not bool(b.detach().abs().sum() > 0):
            raise ExerciseFailed(f"{name}: {call_text}: A starts at zero as well as B; then "
                                 "the gradients of both are zero and nothing ever trains. "
                                 "How does nn.Linear initialise its weight?")
        if not bool(a.detach().abs().sum() > 0):
            raise ExerciseFailed(f"{name}: {call_text}: A starts at zero and B at random "
                                 "values. That trains too, but it is not LoRA's start: peft "
                                 "zeroes B and draws A at random, so the product B A starts at "
                                 "zero with A already pointing somewhere.")
        # The same adapter values in both layers (B no longer zero), then compare everything.
        reference = _peft_layer(base, rank, alpha)
        a_value = torch.randn(rank, in_features, generator=generator)
        b_value = torch.randn(out_features, rank, generator=generator)
        _set(a, a_t, a_value)
        _set(b, b_t, b_value)
        _set(reference.lora_A["default"].weight, False, a_value)
        _set(reference.lora_B["default"].weight, False, b_value)
        got, expected = call_or_fail(name, forward, layer, x), reference(x)
        if not torch.allclose(got, expected, rtol=1e-4, atol=1e-5):
            update = x @ a_value.t() @ b_value.t()
            raise ExerciseFailed(f"{name}: {call_text}, with A and B set to random values: "
                                 + _lora_mistake(got.detach(), base_out, update, rank, alpha))
        if not got.requires_grad:
            raise ExerciseFailed(f"{name}: {call_text}: your output carries no graph back to "
                                 "lora_A and lora_B, so no gradient reaches them: is the "
                                 "correction computed from detached copies, or under "
                                 "torch.no_grad?")
        got.pow(2).sum().backward()
        expected.pow(2).sum().backward()
        for which, mine, theirs, transposed in (("A", a, reference.lora_A["default"].weight, a_t),
                                                ("B", b, reference.lora_B["default"].weight, b_t)):
            grad = mine.grad.t() if transposed and mine.grad is not None else mine.grad
            if grad is None or not torch.allclose(grad, theirs.grad, rtol=1e-4, atol=1e-5):
                raise ExerciseFailed(f"{name}: {call_text}: the gradient of lora_{which} differs "
                                     "from peft's: is the correction computed from A and B "
                                     "themselves (not detached copies)?")
        _check_merge(name, call_text, layer, reference, base, original, x, a_value, b_value,
                     rank, alpha)
    passed(name, "frozen base, zero start, peft's outputs and gradients with the same A and B, "
                 "peft's merged weight and outputs, and back again after unmerge")


def _check_merge(name, call_text, layer, reference, base, original, x, a_value, b_value, rank,
                 alpha) -> None:
    with torch.no_grad():
        before = layer(x)
        call_or_fail(name, f"{call_text}: merge()", layer.merge)
        reference.merge()
        merged = base.weight.detach()
        expected = reference.base_layer.weight.detach()
        if not torch.allclose(merged, expected, rtol=1e-4, atol=1e-5):
            if torch.allclose(merged, original + b_value @ a_value, rtol=1e-4, atol=1e-5):
                hint = "merge() added B A without its alpha / rank scaling."
            elif torch.allclose(merged, original, rtol=0, atol=0):
                hint = "merge() left the base layer's weight as it was: add the correction into it."
            else:
                hint = "merge() did not add (alpha / rank) B A into the base layer's weight."
            raise ExerciseFailed(f"{name}: {call_text}: {hint}")
        after = call_or_fail(name, f"{call_text}: forward after merge()", layer, x)
        if not torch.allclose(after, reference(x), rtol=1e-4, atol=1e-5):
            hint = ("after merge() your layer still adds B A x on top, so the correction "
                    "counts twice: a merged layer is the base layer alone."
                    if not torch.allclose(after, before, rtol=1e-4, atol=1e-4) else
                    "after merge() your outputs differ from peft's merged layer.")
            raise ExerciseFailed(f"{name}: {call_text}: {hint}")
        call_or_fail(name, f"{call_text}: unmerge()", layer.unmerge)
        if not torch.allclose(base.weight, original, rtol=1e-5, atol=1e-5):
            raise ExerciseFailed(f"{name}: {call_text}: after merge() then unmerge() the base "
                                 "weight is not the original: unmerge must take out exactly "
                                 "what merge put in.")
        restored = call_or_fail(name, f"{call_text}: forward after unmerge()", layer, x)
        if not torch.allclose(restored, before, rtol=1e-4, atol=1e-5):
            raise ExerciseFailed(f"{name}: {call_text}: after unmerge() the layer's outputs "
                                 "differ from before merge(): the correction must be added in "
                                 "the forward pass again.")


# ---------------------------------------------------------------- Exercise 1: corpus BLEU

_BLEU = "Exercise 1 (BLEU)"


def bleu_reference(hypotheses: list[list[str]], references: list[list[str]]) -> float:
    """The lab's fallback for Exercise 1: corpus BLEU (0-100) of tokenized sentences, one
    reference each, with sacrebleu's default ("exp") smoothing (llmlab.evaluate.ngram_bleu)."""
    return bleu_from_counts(_corpus_counts(hypotheses, references))


def _corpus_counts(hypotheses, references, clip: bool = True) -> BleuCounts:
    total = BleuCounts(0, 0, (0,) * 4, (0,) * 4)
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        counts = sentence_counts(hypothesis, [reference])
        if not clip:
            matches = tuple(sum(count for gram, count in ngram_counts(hypothesis, n).items()
                                if gram in ngram_counts(reference, n)) for n in range(1, 5))
            counts = BleuCounts(counts.hypothesis_length, counts.reference_length, matches,
                                counts.totals)
        total += counts
    return total


def _without_brevity(counts: BleuCounts) -> float:
    return bleu_from_counts(BleuCounts(counts.reference_length, counts.reference_length,
                                       counts.matches, counts.totals))


def _arithmetic(counts: BleuCounts) -> float:
    c, r = counts.hypothesis_length, counts.reference_length
    brevity = 1.0 if c >= r else (math.exp(1 - r / c) if c else 0.0)
    precisions = [m / t if t else 0.0 for m, t in zip(counts.matches, counts.totals, strict=True)]
    return 100 * brevity * sum(precisions) / len(precisions)


def _inverted_brevity(counts: BleuCounts) -> float:
    c, r = counts.hypothesis_length, counts.reference_length
    if not c or c >= r:
        return bleu_from_counts(counts)
    return bleu_from_counts(counts) * math.exp(1 - c / r) / math.exp(1 - r / c)


def _mean_of_present_orders(counts: BleuCounts) -> float:
    """BLEU with the orders that have no n-gram at all left out of the mean."""
    present = [n for n, total in enumerate(counts.totals) if total]
    if not present:
        return math.nan
    return bleu_from_counts(BleuCounts(counts.hypothesis_length, counts.reference_length,
                                       tuple(counts.matches[n] for n in present),
                                       tuple(counts.totals[n] for n in present)))


def _bleu_mistakes(hypotheses, references) -> list[tuple[float, str]]:
    counts = _corpus_counts(hypotheses, references)
    ratio = counts.hypothesis_length / counts.reference_length
    sentences = [bleu_from_counts(sentence_counts(h, [r])) for h, r in
                 zip(hypotheses, references, strict=True)]
    # A mistake that changes nothing on this corpus is nan here: it matches no answer.
    return [
        (bleu_from_counts(_corpus_counts(hypotheses, references, clip=False)),
         "your n-gram matches are not clipped: a hypothesis n-gram may count at most as often as "
         "the reference has it (\"the the the\" earns one \"the\" against \"the cat\")."),
        (_without_brevity(counts),
         "there is no brevity penalty: precision alone rewards saying little; how does BLEU "
         "punish hypotheses shorter than their references?"),
        (_inverted_brevity(counts),
         "your brevity penalty compares the lengths the wrong way round: which ratio makes a "
         "short hypothesis pay more the shorter it is?"),
        (bleu_from_counts(counts) * math.exp(1 - 1 / ratio) if ratio > 1 else math.nan,
         "your brevity penalty changes the score of hypotheses longer than their references: "
         "it only ever punishes hypotheses that are too short."),
        (_mean_of_present_orders(counts),
         "the hypotheses are too short to hold a 4-gram, and your mean leaves that order out. "
         "Corpus BLEU counts an order with no n-gram at all as a precision of 0 (sacrebleu "
         "leaves orders out only in sentence BLEU, with effective_order)."),
        (_arithmetic(counts),
         "you averaged the four precisions arithmetically: BLEU takes their geometric mean."),
        (bleu_from_counts(counts, smooth="none"),
         "with an n-gram order that has no match your score is 0: that is BLEU without "
         "smoothing. Read sacrebleu's smooth_method='exp' (its default)."),
        (sum(sentences) / len(sentences),
         "you averaged sentence scores: corpus BLEU sums the counts over all sentences first, "
         "then computes one score."),
        (bleu_from_counts(counts) / 100,
         "your score is on a 0-1 scale: sacrebleu reports BLEU from 0 to 100."),
    ]


def _bleu_cases() -> list[tuple[str, list[list[str]], list[list[str]]]]:
    """Random corpora over a small vocabulary (so n-grams match), then edge cases."""
    generator = torch.Generator().manual_seed(8)
    words = "the cat sat on a mat and dog ran".split()

    def sentence(low: int, high: int) -> list[str]:
        length = int(torch.randint(low, high, (1,), generator=generator))
        return [words[int(i)] for i in torch.randint(0, len(words), (length,),
                                                      generator=generator)]

    cases = []
    for size in (5, 12):
        references = [sentence(6, 14) for _ in range(size)]
        hypotheses = [r[: len(r) - 2] + sentence(0, 4) if i % 2 else sentence(4, 12)
                      for i, r in enumerate(references)]
        cases.append((f"{size} random sentences", hypotheses, references))
    ref = "the cat sat on the mat".split()
    cases += [
        ("a perfect copy", [ref], [ref]),
        ("repeated words (clipping)", ["the the the the the the the".split(), ref[:5]],
         [ref, ref]),
        ("hypotheses shorter than their references", [ref[:4], "a dog ran".split()],
         [ref, "a dog ran on the mat".split()]),
        ("hypotheses longer than their references",
         ["the cat sat on the mat and the dog ran".split(), "a dog ran on the mat too".split()],
         [ref, "a dog ran on a mat".split()]),
        ("hypotheses of fewer than 4 words", ["the cat sat".split(), "a dog".split()],
         [ref, "a dog ran".split()]),
        ("no 4-gram match", ["the cat ran on the mat".split(), "a dog sat on the cat".split()],
         [ref, "the dog sat on a mat".split()]),
        ("an empty hypothesis beside a good one", [[], ref], [ref, ref]),
        ("only empty hypotheses", [[], []], [ref, ref]),
    ]
    return cases


def sacrebleu_bleu(hypotheses: list[list[str]], references: list[list[str]]) -> float:
    """sacrebleu's corpus BLEU of already tokenized sentences (joined by spaces, no tokenizer)."""
    import sacrebleu

    return sacrebleu.corpus_bleu([" ".join(h) for h in hypotheses],
                                 [[" ".join(r) for r in references]], tokenize="none").score


@exercise(fallback=bleu_reference, fallback_name="llmlab.course.checks.lab08.bleu_reference")
def exercise_bleu(bleu) -> None:
    """Exercise 1: bleu(hypotheses, references) -> corpus BLEU (0-100) of token lists, one
    reference per hypothesis, smoothed as sacrebleu's default."""
    name = _BLEU
    for what, hypotheses, references in _bleu_cases():
        call_text = f"bleu(<{what}>)"
        try:
            got = call(name, bleu, [list(h) for h in hypotheses], [list(r) for r in references])
        except ZeroDivisionError:
            raise ExerciseFailed(f"{name}: {call_text} divided by zero. An empty hypothesis has "
                                 "no n-grams and no length: what must its brevity penalty and "
                                 "precisions be?") from None
        except Exception as error:
            raise failure_from(name, call_text, error) from error
        got = expect_real(name, call_text, got)
        expected = sacrebleu_bleu(hypotheses, references)
        if math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-6):
            continue
        hint = next((text for wrong, text in _bleu_mistakes(hypotheses, references)
                     if math.isclose(got, wrong, rel_tol=1e-6, abs_tol=1e-9)), "")
        raise ExerciseFailed(f"{name}: {call_text} returned {got:.4f}, sacrebleu says "
                             f"{expected:.4f}. {hint}".strip())
    passed(name, "sacrebleu's corpus BLEU on random corpora, repeated words, short, long, "
                 "empty and under-4-word hypotheses and no 4-gram match")


NOTEBOOK = "08_finetuning.ipynb"
# The function or class each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "bleu": exercise_bleu,
    "MyLoRALinear": exercise_lora_linear,
}
