"""Checks for Lab 08 (fine-tuning and evaluation), and the versions the lab falls back to.

Exercise 2 (a LoRA layer) is checked against peft's own LoRA layer on the same base weights:
the start, the outputs with the same adapter values, the gradients, the merged weight and its
outputs, and the unmerge. Exercise 1 (corpus BLEU) is checked against sacrebleu on random
corpora and edge cases. Exercise 3 (the paired bootstrap) is checked against llmlab's paired
percentile bootstrap on the same draws, with a corpus metric that is not a mean of sentence
scores and with an accuracy. Exercise 4 (back-translation's generate-filter-mix loop) runs on
random dates with a reverse "model" that is sometimes wrong, against llmlab.data.augment's loop
for the count. When an answer differs, the check recomputes each likely mistake
and names the one the answer matches.
"""

import math
import random
import zlib
from collections import Counter

import numpy as np
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
    real_number,
)
from llmlab.data.augment import augment_by_back_translation, is_iso_date
from llmlab.data.tasks import task_splits
from llmlab.evaluate.bootstrap import (
    paired_percentile,
    percentile_test,
    resample_indices,
    resampled_scores,
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


# ---------------------------------------------------------------- Exercise 3: the paired bootstrap

_PAIRED = "Exercise 3 (the paired bootstrap)"
# Answers in float32 (torch's default) are right to about 1e-7; the scores here lie in [0, 1].
_TOLERANCE = 1e-6
# np.percentile's ways of reading a percentile that falls between two neighbouring draws: any is a
# right answer, as is llmlab's (the draws themselves, so that the p-value agrees exactly).
_PERCENTILE_METHODS = ("inverted_cdf", "averaged_inverted_cdf", "closest_observation",
                       "interpolated_inverted_cdf", "hazen", "weibull", "linear",
                       "median_unbiased", "normal_unbiased", "lower", "higher", "midpoint",
                       "nearest")


def paired_bootstrap_reference(metric, outputs_a, outputs_b, references, draws):
    """The lab's fallback for Exercise 3: (low, high, p_value) of metric(b) - metric(a) over the
    given draws, by the paired percentile bootstrap (llmlab.evaluate.paired_percentile)."""
    _, low, high, p_value = paired_percentile(metric, outputs_a, outputs_b, references, draws)
    return low, high, p_value


def word_precision(hypotheses, references) -> float:
    """The share of the hypotheses' words found in their reference (each reference word used
    once). The counts are summed over the corpus before dividing, as BLEU's are, so the score is
    not the mean of the sentences' precisions."""
    found = sum(sum((Counter(h.split()) & Counter(r.split())).values())
                for h, r in zip(hypotheses, references, strict=True))
    return found / sum(len(h.split()) for h in hypotheses)


def exact_match(hypotheses, references) -> float:
    """The share of answers equal to their reference: an accuracy, a mean of 0s and 1s."""
    return sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(references)


def _paired_cases():
    """(what, metric, outputs_a, outputs_b, references, draws): random corpora and answer sets,
    then identical systems, a far better system and a test set of 3 sentences."""
    rng = np.random.default_rng(8)
    words = "the cat sat on a mat and dog ran fast".split()

    def corpus(size, *rates):
        """References of 2-11 words and, per rate, hypotheses with that share of words replaced
        and 0-3 words cut or added: sentences of many lengths, so a mean of sentence scores
        differs from the corpus score."""
        references = [list(rng.choice(words, rng.integers(2, 12))) for _ in range(size)]
        systems = []
        for rate in rates:
            outputs = []
            for reference in references:
                changed = [str(rng.choice(words)) if rng.random() < rate else w for w in reference]
                extra = int(rng.integers(-3, 4))
                outputs.append(" ".join(changed[: max(1, len(changed) + extra)]
                                        + list(rng.choice(words, max(0, extra)))))
            systems.append(outputs)
        return [*systems, [" ".join(r) for r in references]]

    def answers(size, *rates):
        references = [str(rng.choice(words)) for _ in range(size)]
        return [*[[r if rng.random() < rate else "?" for r in references] for rate in rates],
                references]

    def draws(size, samples):
        return resample_indices(size, samples, seed=int(rng.integers(1000)))

    a, b, refs = corpus(40, 0.5, 0.35)
    cases = [("40 sentences, b better", word_precision, a, b, refs, draws(40, 300))]
    a, b, refs = corpus(25, 0.3, 0.45)
    cases.append(("25 sentences, a better", word_precision, a, b, refs, draws(25, 200)))
    a, b, refs = answers(60, 0.55, 0.65)
    cases.append(("60 answers", exact_match, a, b, refs, draws(60, 300)))
    a, b, refs = answers(30, 0.5, 0.5)
    cases.append(("30 answers, a close call", exact_match, a, b, refs, draws(30, 200)))
    a, refs = corpus(20, 0.4)
    cases.append(("identical systems", word_precision, a, list(a), refs, draws(20, 100)))
    a, b, refs = answers(50, 0.1, 0.9)
    cases.append(("b far better", exact_match, a, b, refs, draws(50, 200)))
    a, b, refs = corpus(3, 0.5, 0.2)
    cases.append(("3 sentences", word_precision, a, b, refs, draws(3, 40)))
    return cases


def _three_numbers(got) -> tuple[float, float, float] | None:
    """The answer (low, high, p_value) as floats when it is a tuple, list, numpy array or tensor
    of three real numbers of any type; else None."""
    items = list(got) if isinstance(got, tuple | list) or getattr(got, "ndim", None) == 1 else []
    numbers = [real_number(item) for item in items]
    return None if len(numbers) != 3 or None in numbers else (numbers[0], numbers[1], numbers[2])


def _bands(draws: np.ndarray):
    """The range each end of the 95% percentile interval of `draws` takes over np.percentile's
    methods and llmlab's: ((lowest low, highest low), (lowest high, highest high))."""
    low, high, _ = percentile_test(draws)
    lows, highs = zip(*(np.percentile(draws, [2.5, 97.5], method=method)
                        for method in _PERCENTILE_METHODS), strict=True)
    return (min(*lows, low), max(*lows, low)), (min(*highs, high), max(*highs, high))


def _exactly(low: float, high: float):
    return (low, low), (high, high)


def _in_band(value: float, band: tuple[float, float]) -> bool:
    return band[0] - _TOLERANCE <= value <= band[1] + _TOLERANCE


def _matches(interval, bands) -> bool:
    return _in_band(interval[0], bands[0]) and _in_band(interval[1], bands[1])


def _paired_mistakes(metric, a, b, references, draws, differences):
    """(hint, intervals, p-values) of each likely mistake: the answer has made it when it matches
    one of its intervals (if it names any) and one of its p-values (if it names any)."""
    scores_a = resampled_scores(metric, a, references, draws)
    scores_b = resampled_scores(metric, b, references, draws)
    observed = metric(b, references) - metric(a, references)
    below, above = np.mean(differences <= 0), np.mean(differences >= 0)
    draws_made = len(differences)
    deviations = np.abs(differences - differences.mean())
    absolute = np.abs(differences)  # sacrebleu's way: absolute differences shifted to mean zero
    beyond = [np.sum(deviations >= abs(observed)), np.sum(deviations > abs(observed)),
              np.sum(absolute - absolute.mean() > abs(observed))]

    def sentence_mean(hypotheses, refs):
        return np.mean([metric([h], [r]) for h, r in zip(hypotheses, refs, strict=True)])

    per_sentence, *_, per_sentence_p = paired_percentile(sentence_mean, a, b, references, draws)
    normal = [_exactly(centre - 1.96 * spread, centre + 1.96 * spread)
              for centre in (differences.mean(), observed)
              for spread in (differences.std(), differences.std(ddof=1))]
    return [
        ("your interval is the mirror image of the right one: the difference is taken the wrong "
         "way round. The exercise asks for b's score minus a's, so that a positive difference "
         "says b is better.", [_bands(-differences)], []),
        ("your interval is that of one system's scores alone, not of the differences between "
         "the two systems on each draw.", [_bands(scores_b), _bands(scores_a)], []),
        ("your interval is the mean of the differences plus or minus 1.96 standard deviations "
         "(a normal approximation): the percentile bootstrap reads its interval off the drawn "
         "differences themselves. Read np.percentile.", normal, []),
        ("your scores are means of per-sentence scores. This metric, like corpus BLEU, sums its "
         "counts over all the sentences of a draw before it divides, so it is not a mean of "
         "sentence scores: score each draw's outputs as a whole.",
         [_bands(per_sentence)], [per_sentence_p]),
        ("your p-value comes from the draws shifted to mean zero (a test of \"no difference\" by "
         "another procedure), so it can disagree with the percentile interval. Take it from the "
         "same draws as the interval: at what level would the interval start to exclude 0?",
         [], [(count + extra) / (draws_made + extra) for count in beyond for extra in (0, 1)]),
        ("your p-value counts one tail of the draws only: a two-sided p-value asks about a "
         "difference as far from 0 in either direction, so both tails count.",
         [], [min(below, above), below, above]),
        ("your p-value looks at one fixed side of 0, as if b were always the better system: "
         "here it is not. Which side of 0 holds the fewer draws?",
         [], [min(1.0, 2 * below), min(1.0, 2 * above)]),
        ("your p-value is above 1, and a p-value is a probability: when both sides of 0 hold "
         "more than half of the draws (for identical systems every draw is 0), what is the most "
         "it can be?", [], [2 * below, 2 * above]),
        ("your p-value adds one to the draws it counts (as a permutation test does, so that p "
         "is never 0): the percentile bootstrap's p-value is the level at which its interval "
         "would start to exclude 0, a share of the draws themselves. p = 0 says that no draw "
         "reached 0.", [], [min(1.0, 2 * (min(below, above) * draws_made + 1) / (draws_made + 1))]),
        ("your p-value leaves out the draws where the difference is exactly 0: such a tie "
         "belongs to both sides of 0 (for identical systems every draw is a tie, and p is 1).",
         [], [min(1.0, 2 * min(np.mean(differences < 0), np.mean(differences > 0)))]),
    ]


def _paired_hint(paired_bootstrap, answer, wrong_interval, wrong_p, metric, a, b, references,
                 draws, differences) -> str:
    """The hint of the first likely mistake the answer matches, else of unpaired draws when the
    learner's function finds a difference between a system and itself."""
    low, high, p_value = answer
    for text, intervals, p_values in _paired_mistakes(metric, a, b, references, draws,
                                                      differences):
        names_a_wrong_part = (wrong_interval and intervals) or (wrong_p and p_values)
        if (names_a_wrong_part
                and (not intervals or any(_matches((low, high), i) for i in intervals))
                and (not p_values or any(abs(p_value - p) <= _TOLERANCE for p in p_values))):
            return text
    try:
        itself = _three_numbers(paired_bootstrap(metric, list(a), list(a), list(references),
                                                 draws.copy()))
    except Exception:  # the learner's code fails on this probe: nothing more to say
        return ""
    if itself is not None and max(abs(itself[0]), abs(itself[1])) > _TOLERANCE:
        return ("with a and b the same system your interval is not [0, 0], so your draws are "
                "not paired: score both systems on the same rows of each draw (that is what "
                "cancels the luck they share).")
    return ""


@exercise(fallback=paired_bootstrap_reference,
          fallback_name="llmlab.course.checks.lab08.paired_bootstrap_reference")
def exercise_paired_bootstrap(paired_bootstrap) -> None:
    """Exercise 3: paired_bootstrap(metric, outputs_a, outputs_b, references, draws) -> (low, high,
    p_value): the 95% percentile interval of metric(b) - metric(a) over the draws (rows of
    test-set indices, the same for both systems) and its two-sided p-value."""
    name = _PAIRED
    for what, metric, a, b, references, draws in _paired_cases():
        call_text = (f"paired_bootstrap({metric.__name__}, <{what}>, draws of shape "
                     f"{draws.shape})")
        got = call_or_fail(name, call_text, paired_bootstrap, metric, list(a), list(b),
                           list(references), draws.copy())
        answer = _three_numbers(got)
        if answer is None:
            raise ExerciseFailed(f"{name}: {call_text} returned {got!r}; return three numbers: "
                                 "(low, high, p_value).")
        low, high, p_value = answer
        differences, right_low, right_high, right_p = paired_percentile(metric, a, b, references,
                                                                        draws)
        wrong_interval = not _matches((low, high), _bands(differences))
        wrong_p = abs(p_value - right_p) > _TOLERANCE
        if not (wrong_interval or wrong_p):
            continue
        hint = _paired_hint(paired_bootstrap, answer, wrong_interval, wrong_p, metric, a, b,
                            references, draws, differences)
        raise ExerciseFailed(
            f"{name}: {call_text} returned [{low:.4f}, {high:.4f}] with p = {p_value:.4f}; the "
            f"paired percentile bootstrap gives [{right_low:.4f}, {right_high:.4f}] with "
            f"p = {right_p:.4f}. {hint}".strip())
    passed(name, "the paired percentile interval and p-value on random corpora (a corpus metric "
                 "and an accuracy), identical systems, a far better system and 3 sentences")


# -------------------------------------------------------------- Exercise 4: back-translation's loop

_BACK = "Exercise 4 (back-translation)"


def _back_translation_case(seed: int):
    """Random dates: a small real share, a pool that (carelessly) holds the test items too, and a
    reverse "model" that writes the right ISO date, a wrong one, or something that is no date."""
    rng = random.Random(seed)
    splits = task_splits("dates", {"train": rng.randrange(60, 120), "test": 30}, seed=seed)
    n_real = rng.randrange(5, 15)
    real = [(i.prompt, i.answer) for i in splits["train"][:n_real]]
    truth = {i.answer: i.key for i in splits["train"] + splits["test"]}

    def translate_back(targets):
        out = []
        for t in targets:
            y, m, d = truth[t]
            draw = zlib.crc32(f"{seed} {t}".encode()) % 5  # the same on every run
            out.append("not a date" if draw == 0 else f"{y:04d}-{m:02d}-{d + 40:02d}"
                       if draw == 1 else f"{y:04d}-{m:02d}-{d:02d}")
        return out

    pool = splits["train"][n_real:] + splits["test"]
    avoid = [splits["train"][:n_real], splits["test"]]
    return real, pool, avoid, translate_back, (lambda s, t: is_iso_date(s)), rng.choice((0.5, 1, 2))


@exercise(fallback=augment_by_back_translation,
          fallback_name="llmlab.data.augment.augment_by_back_translation")
def exercise_back_translation(augment) -> None:
    """augment(real, pool, avoid, translate_back, keep, ratio, rng) -> the mixed pairs."""
    name = _BACK
    for seed in range(5):
        real, pool, avoid, back, keep, ratio = _back_translation_case(seed)
        call_text = f"augment(<{len(real)} real pairs, ratio {ratio}>)"
        got = call_or_fail(name, call_text, augment, real, pool, avoid, back, keep, ratio,
                           random.Random(seed))
        got = [tuple(pair) for pair in got]
        expected = augment_by_back_translation(real, pool, avoid, back, keep, ratio,
                                               random.Random(seed))
        synthetic = [pair for pair in got if pair not in real]
        forbidden = {item.answer for split in avoid for item in split}
        if any(t in forbidden for _, t in synthetic) or any(s in forbidden for s, _ in synthetic):
            raise ExerciseFailed(f"{name}: {call_text} made a synthetic pair from an answer of a "
                                 "split to avoid: a test answer leaked into training.")
        if sorted(p for p in got if p in real) != sorted(real):
            raise ExerciseFailed(f"{name}: {call_text} does not hold every real pair exactly once.")
        if synthetic and all(not keep(*pair) for pair in synthetic):
            raise ExerciseFailed(f"{name}: {call_text}: every synthetic pair is one the filter "
                                 "rejects. Is the filter the right way round?")
        if any(not keep(*pair) for pair in synthetic):
            raise ExerciseFailed(f"{name}: {call_text} kept synthetic pairs the filter rejects.")
        if len(synthetic) != len(expected) - len(real):
            raise ExerciseFailed(
                f"{name}: {call_text} mixed in {len(synthetic)} synthetic pairs, expected "
                f"{len(expected) - len(real)}: ratio is synthetic pairs per real pair "
                f"(and at most as many as passed the filter).")
    passed(name, "no leaked answer, every real pair once, the filter's survivors only, and the "
                 "ratio, on random dates")


NOTEBOOK = "08_finetuning.ipynb"
# The function or class each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "bleu": exercise_bleu,
    "MyLoRALinear": exercise_lora_linear,
    "paired_bootstrap": exercise_paired_bootstrap,
    "augment_by_back_translation": exercise_back_translation,
}
