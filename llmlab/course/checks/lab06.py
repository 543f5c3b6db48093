"""Checks for Lab 06 (pruning), and the versions the lab falls back to.

Exercise 1 is checked against torch.nn.utils.prune.global_unstructured, Exercise 5 against
llmlab.prune.wanda. Where weights tie at the threshold no threshold alone can prune exactly k of
them, and the library's choice among the tied ones is topk's, not a rule: there the check asks
for exactly k pruned and no pruned weight larger than a kept one, and accepts any choice among
the ties.
"""

import copy
import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import prune

from llmlab.course.checks import (
    ExerciseFailed,
    call_or_fail,
    exercise,
    passed,
    real_number,
    tensor_of_shape,
)
from llmlab.models import build_model, input_dim, preset
from llmlab.models.observe import observe_inputs
from llmlab.prune import (
    cubic_sparsity,
    current_weight,
    nm_mask,
    prunable_weights,
    smallest_mask,
    wanda_mask,
)
from llmlab.prune.structured import sliced
from llmlab.prune.wanda import input_norms


def _as_mask(name: str, call_text: str, got, shape: tuple) -> torch.Tensor:
    """`got` (a tensor, a numpy array, nested lists) as a bool keep-mask of `shape`, or a failure
    that says what a mask is."""
    got = tensor_of_shape(name, call_text, got, shape, "a mask", "the weight's")
    if got.dtype != torch.bool and not bool(((got == 0) | (got == 1)).all()):
        raise ExerciseFailed(f"{name}: {call_text} returned values other than 0 and 1: a mask "
                             "holds True (keep) or False (prune) for each weight.")
    return got.bool()


# ---------------------------------------------------------------- Exercise 1: global magnitude


def global_magnitude_mask_reference(weights: list[torch.Tensor], sparsity: float):
    """The lab's fallback for Exercise 1: one ranking of |w| over all tensors (llmlab.prune)."""
    keep = smallest_mask(torch.cat([w.detach().abs().flatten() for w in weights]), sparsity)
    return [part.view(w.shape) for part, w in zip(keep.split([w.numel() for w in weights]),
                                                  weights, strict=True)]


def _library_masks(weights: list[torch.Tensor], sparsity: float) -> list[torch.Tensor]:
    """torch.nn.utils.prune.global_unstructured's keep-masks for the same tensors."""
    holders = []
    for weight in weights:
        holder = nn.Module()
        holder.weight = nn.Parameter(weight.clone())
        holders.append(holder)
    prune.global_unstructured([(h, "weight") for h in holders], prune.L1Unstructured,
                              amount=sparsity)
    return [h.weight_mask.bool() for h in holders]


def _global_cases() -> list[tuple[str, list[torch.Tensor], float]]:
    """Tensors of different sizes and scales (so one threshold and per-tensor ones differ), at
    sparsities where round(s * total) differs from rounding up (33%) and from rounding down
    (87%), and one set whose values repeat (ties at the threshold)."""
    generator = torch.Generator().manual_seed(6)
    shapes, scales = [(16, 8), (32,), (6, 10), (4, 3, 5)], [1.0, 0.2, 3.0, 0.7]
    scaled = [torch.randn(s, generator=generator) * c for s, c in zip(shapes, scales, strict=True)]
    tied = [torch.randint(-4, 5, s, generator=generator).float() / 4 for s in shapes[:3]]
    return [("4 tensors of different sizes and scales", scaled, 0.5),
            ("the same tensors", scaled, 0.33),  # 92.4 weights: 92 pruned, not 93
            ("the same tensors", scaled, 0.87),  # 243.6 weights: 244 pruned, not 243
            ("the same tensors", scaled, 0.0),
            ("3 tensors whose values repeat (ties)", tied, 0.4)]


def _global_hint(weights, got, sparsity, ties: bool) -> str:
    total = sum(w.numel() for w in weights)
    k = round(sparsity * total)
    pruned = sum(int((~mask).sum()) for mask in got)
    magnitudes = torch.cat([w.abs().flatten() for w in weights])
    keep = torch.cat([mask.flatten() for mask in got])
    reference = torch.cat([m.flatten() for m in global_magnitude_mask_reference(weights, sparsity)])
    if k and pruned != k and torch.equal(keep, ~reference):
        return (
            "your mask is the opposite of the expected one: True means keep the weight, "
            "False means prune it."
        )
    per_tensor = [smallest_mask(w.abs(), sparsity) for w in weights]
    if k and all(torch.equal(g, p) for g, p in zip(got, per_tensor, strict=True)):
        return (
            "every tensor lost the same fraction: that is layer-wise pruning. Global pruning "
            "ranks the weights of all the tensors together, with one threshold."
        )
    if 0 < pruned == k < total and bool(magnitudes[~keep].min() >= magnitudes[keep].max()):
        return (
            "the largest weights were pruned: magnitude pruning removes the smallest |w| "
            "(and a mask holds True for the weights it keeps)."
        )
    if pruned != k and not ties and pruned in (math.floor(sparsity * total),
                                                math.ceil(sparsity * total)):
        way = "up" if pruned > k else "down (int() drops the fraction)"
        return (f"{pruned} weights were pruned, expected round(sparsity * total) = {k} of "
                f"{total}: sparsity * total = {sparsity * total:.4g} was rounded {way}. Round "
                "it to the nearest whole number, as torch.nn.utils.prune does.")
    if pruned != k:
        tie_note = (" Several weights here share the value at the threshold: a comparison with "
                    "it alone prunes all of them or none. How can you choose exactly the ones "
                    "needed?") if ties else ""
        return (
            f"{pruned} weights were pruned, expected round(sparsity * total) = {k} of "
            f"{total}. Check how k is computed and whether the k-th value itself is pruned "
            f"(read torch.kthvalue: is k counted from 1?).{tie_note}"
        )
    return (
        "a kept weight is smaller in magnitude than a pruned one: rank by |w| (the absolute "
        "value), over all the tensors together."
    )


@exercise(
    fallback=global_magnitude_mask_reference,
    fallback_name="llmlab.course.checks.lab06.global_magnitude_mask_reference",
)
def exercise_global_magnitude_mask(global_magnitude_mask) -> None:
    """Exercise 1: global_magnitude_mask(weights, sparsity) -> one keep-mask per tensor."""
    name = "Exercise 1 (global magnitude mask)"
    for what, weights, sparsity in _global_cases():
        call_text = f"global_magnitude_mask(<{what}>, {sparsity})"
        got = call_or_fail(name, call_text, global_magnitude_mask, [w.clone() for w in weights],
                           sparsity)
        if not isinstance(got, (list, tuple)) or len(got) != len(weights):
            raise ExerciseFailed(
                f"{name}: {call_text} returned {type(got).__name__}; return a "
                f"list of {len(weights)} masks, one per tensor, in order."
            )
        got = [_as_mask(name, call_text, g, w.shape) for g, w in zip(got, weights, strict=True)]
        library = _library_masks(weights, sparsity)
        ties = "ties" in what
        if ties:
            # Any choice among tied weights: exactly k pruned, none larger than a kept one.
            magnitudes = torch.cat([w.abs().flatten() for w in weights])
            keep = torch.cat([m.flatten() for m in got])
            right = int((~keep).sum()) == round(sparsity * magnitudes.numel()) and (
                bool(keep.all()) or bool(magnitudes[~keep].max() <= magnitudes[keep].min())
            )
        else:
            right = all(torch.equal(g, m) for g, m in zip(got, library, strict=True))
        if not right:
            hint = _global_hint(weights, got, sparsity, ties)
            raise ExerciseFailed(f"{name}: {call_text}: {hint}")
    passed(
        name,
        "the same masks as torch.nn.utils.prune.global_unstructured on tensors of "
        "different sizes, at 0, 33, 50 and 87% sparsity; exactly k pruned where values tie",
    )


# ---------------------------------------------------------------- Exercise 2: cubic schedule

# (step, final, start, end, initial): before, at and after the window, with and without s_i;
# the last window starts late with an initial sparsity, so "s_i before the start" shows.
SCHEDULE_CASES = [(s, 0.8, 10, 110, 0.0) for s in (0, 9, 10, 11, 35, 60, 85, 109, 110, 111, 500)]
SCHEDULE_CASES += [(s, 0.9, 0, 40, 0.3) for s in (0, 5, 20, 39, 40, 80)]
SCHEDULE_CASES += [(s, 0.75, 20, 60, 0.25) for s in (0, 19, 20, 21, 45, 59, 60, 61)]


def _schedule_mistakes(step, final, start, end, initial) -> list[tuple[float, str]]:
    progress = (step - start) / (end - start)
    held = min(max(progress, 0.0), 1.0)
    edges = []  # the start of the window, where "before" ends
    if step < start:
        edges.append((initial, "before the start step the model is still dense (0): the initial "
                      "sparsity is where the schedule stands at the start step, not before it."))
    if step == start and initial > 0:
        edges.append((0.0, f"at the start step the schedule already stands at the initial "
                      f"sparsity, {initial}: is your test for 'before the window' strict, and "
                      "does the initial sparsity enter your formula?"))
    return edges + [
        (initial + (final - initial) * held,
         "your schedule rises in a straight line: Zhu & Gupta's prunes fast at first and "
         "slowly near the end. Which power, of which term, does that?"),
        (initial + (final - initial) * held**3,
         "your schedule starts slowly and speeds up near the end: the opposite of the cubic one. "
         "Is the power applied to the fraction of the window done, or to what is left of it?"),
        (final + (initial - final) * (1 - progress) ** 3,
         "after the end step the final sparsity is held: the formula only holds inside the "
         "pruning window." if step > end else
         "before the start step the model is still dense: the formula only holds inside the "
         "pruning window."),
    ]


@exercise(fallback=cubic_sparsity, fallback_name="llmlab.prune.cubic_sparsity")
def exercise_cubic_sparsity(cubic_sparsity_fn) -> None:
    """Exercise 2: cubic_sparsity(step, final_sparsity, start_step, end_step,
    initial_sparsity=0.0) -> the target sparsity at `step`."""
    name = "Exercise 2 (gradual sparsity schedule)"
    for step, final, start, end, initial in SCHEDULE_CASES:
        call_text = (f"cubic_sparsity({step}, {final}, start_step={start}, end_step={end}, "
                     f"initial_sparsity={initial})")
        got = call_or_fail(name, call_text, cubic_sparsity_fn, step, final, start, end,
                           initial_sparsity=initial)
        number = real_number(got)
        if number is None:
            raise ExerciseFailed(f"{name}: {call_text} returned {got!r}; return a number.")
        expected = cubic_sparsity(step, final, start, end, initial_sparsity=initial)
        if math.isclose(number, expected, rel_tol=1e-6, abs_tol=1e-9):
            continue
        mistakes = _schedule_mistakes(step, final, start, end, initial)
        hint = next((text for value, text in mistakes if math.isclose(number, value, rel_tol=1e-6,
                     abs_tol=1e-9)), "")
        if not hint and step < start:
            hint = "before the start step the model is still dense: nothing is pruned yet."
        raise ExerciseFailed(f"{name}: {call_text} returned {number:.6g}, expected "
                             f"{expected:.6g}. {hint}".strip())
    passed(name, f"equal to Zhu & Gupta's schedule at {len(SCHEDULE_CASES)} steps, before, "
                 "inside and after the pruning window")


# ---------------------------------------------------------------- Exercise 3: shrink an MLP


def shrink_pair_reference(first: nn.Linear, second: nn.Linear, keep: torch.Tensor):
    """The lab's fallback for Exercise 3: keep hidden units `keep` (llmlab.prune.structured)."""
    return sliced(first, 0, keep), sliced(second, 1, keep)


def _mlp(first: nn.Linear, second: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return second(F.gelu(first(x)))


def _masked_output(first, second, keep, x) -> torch.Tensor:
    """The masked model: the removed units' weights out of the hidden layer set to zero."""
    masked = copy.deepcopy(second)
    alive = torch.zeros(second.in_features, dtype=torch.bool)
    alive[keep] = True
    with torch.no_grad():
        masked.weight.mul_(alive)
    return _mlp(first, masked, x)


def _pair_cases():
    generator = torch.Generator().manual_seed(63)
    cases = []
    # Square first: slicing the wrong dimension of the second Linear then still runs.
    for d, hidden, bias in ((16, 16, True), (12, 20, True), (10, 24, False)):
        torch.manual_seed(int(torch.randint(0, 10_000, (), generator=generator)))
        first, second = nn.Linear(d, hidden, bias=bias), nn.Linear(hidden, d, bias=bias)
        keep = torch.randperm(hidden, generator=generator)[: hidden * 3 // 8].sort().values
        cases.append((first, second, keep))
    return cases


def _pair_hint(first, second, keep, got_first, got_second, x, out) -> str:
    k, d = keep.numel(), first.in_features
    hidden = first.out_features
    if got_second.weight.shape != (d, k):
        if got_second.weight.shape == (k, hidden):
            return (
                "the second Linear was sliced along its outputs: its weight is (out_features, "
                "in_features); the hidden units are its inputs."
            )
        if got_second.weight.shape == (d, hidden - k):
            return f"{hidden - k} units were kept: those not in `keep`. Keep the ones in `keep`."
        if got_second.weight.shape == (d, hidden):
            return "the second Linear still reads every hidden unit: nothing was removed."
        return (
            f"the second Linear's weight is {tuple(got_second.weight.shape)}, expected "
            f"({d}, {k}): it reads the {k} kept units and writes the {d} outputs."
        )
    if got_first.weight.shape != (k, d):
        return (f"the first Linear's weight is {tuple(got_first.weight.shape)}, expected "
                f"({k}, {d}): keep its rows (outputs) for the kept units.")
    if first.bias is not None and (got_first.bias is None or got_first.bias.shape != (k,)):
        return ("the first Linear's bias must be kept, one entry per kept unit: it belongs to "
                "the hidden units.")
    if second.bias is not None and (got_second.bias is None or got_second.bias.shape != (d,)):
        return ("the second Linear's bias must stay whole: it belongs to the outputs, which are "
                "all kept.")
    if first.bias is not None:
        unbiased = copy.deepcopy(first)
        nn.init.zeros_(unbiased.bias)
        if torch.allclose(out, _masked_output(unbiased, second, keep, x), atol=1e-5):
            return "the first Linear's bias was not carried over: copy the kept units' entries."
    return (
        "the output differs from the masked model's: is every kept unit's row of the first "
        "Linear (and bias entry) paired with the same unit's column of the second, in the "
        "same order?"
    )


@exercise(
    fallback=shrink_pair_reference, fallback_name="llmlab.course.checks.lab06.shrink_pair_reference"
)
def exercise_shrink_pair(shrink_pair) -> None:
    """Exercise 3: shrink_pair(first, second, keep) -> (smaller first, smaller second): a
    Linear -> activation -> Linear pair holding only the hidden units `keep`."""
    name = "Exercise 3 (shrink a Linear pair)"
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))
    for first, second, keep in _pair_cases():
        bias = "with biases" if first.bias is not None else "without biases"
        call_text = (f"shrink_pair(Linear({first.in_features}, {first.out_features}), "
                     f"Linear({second.in_features}, {second.out_features}), <{keep.numel()} "
                     f"units>) {bias}")
        inputs = x[:, : first.in_features]
        got = call_or_fail(name, call_text, shrink_pair, copy.deepcopy(first),
                           copy.deepcopy(second), keep.clone())
        if not (isinstance(got, (tuple, list)) and len(got) == 2
                and all(isinstance(m, nn.Linear) for m in got)):
            raise ExerciseFailed(f"{name}: {call_text} returned {type(got).__name__}; return "
                                 "the two smaller nn.Linear layers as a pair.")
        with torch.no_grad():
            expected = _masked_output(first, second, keep, inputs)
            k, d = keep.numel(), first.in_features
            shapes_right = (got[0].weight.shape == (k, d) and got[1].weight.shape == (d, k)
                            and (got[0].bias is None or got[0].bias.shape == (k,))
                            and (got[1].bias is None or got[1].bias.shape == (d,)))
            out = _mlp(*got, inputs) if shapes_right else None
            if out is not None and torch.allclose(out, expected, atol=1e-5):
                continue
            hint = _pair_hint(first, second, keep, *got, inputs, out)
        raise ExerciseFailed(f"{name}: {call_text}: {hint}")
    passed(name, "the smaller pairs give the masked model's output, with and without biases")


# ---------------------------------------------------------------- Exercise 4: the 2:4 mask


def two_four_mask_reference(weight: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The lab's fallback for Exercise 4 (llmlab.prune.nm_mask with n=2, m=4)."""
    return nm_mask(weight, 2, 4, dim)


def _two_four_mistakes(weight: torch.Tensor, dim: int) -> list[tuple[torch.Tensor, str]]:
    other = 1 - dim % 2
    wrong_dim = weight.shape[other] % 4 == 0  # grouping along it is possible at all
    flat = weight.abs().flatten().view(-1, 4)
    keep_flat = torch.zeros_like(flat, dtype=torch.bool)
    keep_flat.scatter_(1, flat.topk(2, dim=1).indices, True)
    groups = weight.abs().movedim(dim, -1).reshape(-1, 4)
    smallest = torch.zeros_like(groups, dtype=torch.bool)
    smallest.scatter_(1, groups.topk(2, dim=1, largest=False).indices, True)
    mistakes = [
        (smallest.view(weight.movedim(dim, -1).shape).movedim(-1, dim),
         "the 2 smallest of each group were kept: keep the 2 largest in magnitude."),
        (keep_flat.view(weight.shape),
         "the groups are 4 consecutive entries of the flattened tensor: that follows the memory "
         "order, not `dim`. Move `dim` last before grouping (read torch.movedim)."),
        (smallest_mask(weight.abs(), 0.5),
         "half of the whole tensor was kept (unstructured 50%): 2:4 keeps exactly 2 in every "
         "group of 4 consecutive entries."),
    ]
    if wrong_dim:
        mistakes.insert(2, (  # after the flattened one: for some shapes the two are the same
            nm_mask(weight, 2, 4, other),
            "the groups of 4 run along the wrong dimension: they must be consecutive input "
            "features (the dimension `dim`), the ones a sparse kernel reads together."))
    return mistakes


@exercise(
    fallback=two_four_mask_reference,
    fallback_name="llmlab.course.checks.lab06.two_four_mask_reference",
)
def exercise_two_four_mask(two_four_mask) -> None:
    """Exercise 4: two_four_mask(weight, dim) -> keep-mask with 2 of every 4 consecutive entries
    along `dim` (the input features: 1 for nn.Linear, 0 for GPT-2's Conv1D)."""
    name = "Exercise 4 (2:4 mask)"
    generator = torch.Generator().manual_seed(24)
    # (8, 6) along dim 0: groups of the flattened tensor straddle its rows.
    for shape, dim in (((8, 12), 1), ((12, 8), 0), ((16, 4), 1), ((8, 6), 0)):
        weight = torch.randn(shape, generator=generator)
        call_text = f"two_four_mask(<weight {shape}>, dim={dim})"
        got = _as_mask(name, call_text, call_or_fail(name, call_text, two_four_mask,
                                                     weight.clone(), dim), shape)
        if torch.equal(got, nm_mask(weight, 2, 4, dim)):
            continue
        hint = next((text for mask, text in _two_four_mistakes(weight, dim)
                     if torch.equal(got, mask)), "")
        groups = got.movedim(dim, -1).reshape(-1, 4).sum(1)
        if not hint and not bool((groups == 2).all()):
            hint = (f"a group of 4 along dim {dim} keeps {int(groups[groups != 2][0])} entries: "
                    "every group keeps exactly 2.")
        raise ExerciseFailed(f"{name}: {call_text}: the mask differs from the 2:4 mask of the "
                             f"largest |w|. {hint}".strip())
    passed(name, "2 of every 4 consecutive input features kept, for Linear and Conv1D layouts")


# ---------------------------------------------------------------- Exercise 5: Wanda's masks


def wanda_masks_reference(model: nn.Module, layers: dict, batches: list, sparsity: float):
    """The lab's fallback for Exercise 5: llmlab.prune.wanda's input norms and per-row masks."""
    norms = input_norms(model, layers, batches)
    return {name: wanda_mask(current_weight(layer), norms[name], input_dim(layer), sparsity)
            for name, layer in layers.items()}


# Tiny random models, one of each layout: GPT-2's Conv1D (weight (in, out)), Llama's nn.Linear.
_WANDA_GPT2 = preset("tiny", vocab_size=64, context=16, n_layer=1, d_model=16, n_head=2)
_WANDA_LLAMA = _WANDA_GPT2.replace(family="llama", n_kv_head=1, d_ff=24, tied_embeddings=False)
# 0.3 of 16 inputs is 4.8 (4 pruned per row, not 5); 0 prunes nothing.
WANDA_CASES = [("GPT-2", _WANDA_GPT2, 0.3), ("Llama", _WANDA_LLAMA, 0.3),
               ("Llama", _WANDA_LLAMA, 0.6), ("GPT-2", _WANDA_GPT2, 0.0)]


def _wanda_model(shape, seed: int):
    """A tiny random model whose features 1 and 5 are 8 times larger after every norm layer:
    the outlier features that make Wanda's masks differ from magnitude's. Token-id batches."""
    with torch.random.fork_rng():  # the learner's random state is left alone
        model = build_model(shape, seed=seed).eval()
        with torch.no_grad():
            for module in model.modules():
                if "Norm" in type(module).__name__:  # GPT-2's LayerNorm, Llama's RMSNorm
                    module.weight[[1, 5]] *= 8
        generator = torch.Generator().manual_seed(seed)
        batches = [torch.randint(0, shape.vocab_size, (2, 12), generator=generator)
                   for _ in range(3)]
    return model, batches


def _layer_inputs(model, layers, batches) -> dict[str, list[torch.Tensor]]:
    """{name: [its input on each batch, as (tokens, features)]}: what the mistakes are made of."""
    seen = {name: [] for name in layers}
    observe_inputs(model, layers, batches, lambda name, x: seen[name].append(x.double()))
    return seen


def _row_masks(weight, dim, norms, sparsity, *, count=int, compare_dim=None, lowest=True):
    """Per-row keep-mask of |W| * norms, with the switches the mistakes below turn."""
    shape = [1, 1]
    shape[dim] = -1
    scores = weight.abs() * norms.view(shape)
    along = dim if compare_dim is None else compare_dim  # the dimension one row runs along
    moved = scores.movedim(along, -1)
    prune_count = count(sparsity * moved.shape[-1])
    keep = torch.ones_like(moved, dtype=torch.bool)
    if prune_count:
        keep.scatter_(-1, moved.topk(prune_count, dim=-1, largest=not lowest).indices, False)
    return keep.movedim(-1, along)


def _wanda_mistakes(layer, inputs, sparsity) -> list[tuple[torch.Tensor, str]]:
    """Masks of likely mistakes for one layer (its `inputs` on each batch), each with its hint."""
    weight, dim = current_weight(layer), input_dim(layer)
    l2 = sum(x.pow(2).sum(0) for x in inputs).sqrt().float()
    mistakes = [
        (_row_masks(weight, dim, torch.ones_like(l2), sparsity),
         "these are magnitude masks, pruned per row: the activations did not count. Each "
         "weight's score is |W| times the L2 norm of the input feature it multiplies."),
        (_row_masks(weight, dim, l2, sparsity, lowest=False),
         "the highest scores were pruned: Wanda removes the lowest |W| * ||X||."),
        (~_row_masks(weight, dim, l2, sparsity),
         "your mask is the opposite of Wanda's: True means keep the weight, False prune it."),
        (_row_masks(weight, dim, l2.pow(2), sparsity),
         "the scores use the sum of squares of each input feature, not its square root (the L2 "
         "norm): the ranking within a row changes with it."),
        (_row_masks(weight, dim, sum(x.abs().sum(0) for x in inputs).float(), sparsity),
         "the scores use the sum of |x| (the L1 norm); Wanda's is the L2 norm of each input "
         "feature."),
        (_row_masks(weight, dim, l2, sparsity, compare_dim=1 - dim),
         "the weights were compared within each input column, along the outputs: a row is the "
         "weights that feed one output, and each output loses the same number of them."),
        (_row_masks(weight, dim, l2, sparsity, count=round),
         f"each row lost round(sparsity * inputs) weights; the exercise asks for "
         f"int(sparsity * inputs) = {int(sparsity * weight.shape[dim])} (rounded down, as "
         "Wanda's code does)."),
    ]
    for index, x in enumerate(inputs):
        if len(inputs) > 1:
            which = "last" if index == len(inputs) - 1 else f"number {index + 1}"
            mistakes.append((_row_masks(weight, dim, x.pow(2).sum(0).sqrt().float(), sparsity),
                             f"the norms come from one calibration batch (the {which}) only: a "
                             "feature's norm runs over every token of every batch. Does your "
                             "hook add to what it saw before?"))
    return mistakes


def _wanda_hint(layer, got, expected, inputs, sparsity) -> str:
    for mask, text in _wanda_mistakes(layer, inputs, sparsity):
        if torch.equal(got, mask):
            return text
    dim = input_dim(layer)
    per_row = (~got).movedim(dim, -1).sum(-1)
    prune_count = int(sparsity * got.shape[dim])
    if not bool((per_row == prune_count).all()):
        return (f"its output rows lose from {int(per_row.min())} to {int(per_row.max())} "
                f"weights; each should lose int(sparsity * inputs) = {prune_count}, its lowest "
                "scores: Wanda ranks the weights of each output row among themselves.")
    return (f"{int((got != expected).sum())} of its {got.numel()} entries differ from "
            "llmlab.prune.wanda's mask, though every row loses the right number: are the norms "
            "those of each layer's input over every calibration token?")


@exercise(
    fallback=wanda_masks_reference,
    fallback_name="llmlab.course.checks.lab06.wanda_masks_reference",
)
def exercise_wanda_masks(wanda_masks) -> None:
    """Exercise 5: wanda_masks(model, layers, batches, sparsity) -> {name: keep-mask}: Wanda's
    masks for `layers` (Linear or Conv1D layers of `model`), calibrated on token-id `batches`."""
    name = "Exercise 5 (Wanda's masks)"
    for seed, (family, shape, sparsity) in enumerate(WANDA_CASES):
        model, batches = _wanda_model(shape, seed)
        layers = prunable_weights(model)
        expected = wanda_masks_reference(model, layers, batches, sparsity)
        inputs = _layer_inputs(model, layers, batches)
        before = {key: value.clone() for key, value in model.state_dict().items()}
        call_text = (f"wanda_masks(<tiny random {family}>, <its {len(layers)} layers>, "
                     f"<{len(batches)} batches>, {sparsity})")
        got = call_or_fail(name, call_text, wanda_masks, model, dict(layers),
                           [b.clone() for b in batches], sparsity)
        if not isinstance(got, Mapping) or set(got) != set(layers):
            raise ExerciseFailed(f"{name}: {call_text} returned {type(got).__name__}; return a "
                                 "dict {name: keep-mask} with one entry per layer, under the "
                                 "names of `layers`.")
        hooked = [n for n, m in model.named_modules() if m._forward_pre_hooks or m._forward_hooks]
        if hooked:
            raise ExerciseFailed(f"{name}: {call_text} left hooks on {hooked[0]}: they would "
                                 "run at every later forward pass. Remove each one when done "
                                 "(its handle's .remove()), even if a forward pass fails.")
        after = model.state_dict()
        if any(not torch.equal(before[key], after[key]) for key in before):
            raise ExerciseFailed(f"{name}: {call_text} changed the model's weights: computing "
                                 "the masks must leave the model as it was.")
        for layer_name, layer in layers.items():
            mask = _as_mask(name, f"{call_text}[{layer_name!r}]", got[layer_name],
                            layer.weight.shape)
            if not torch.equal(mask, expected[layer_name]):
                hint = _wanda_hint(layer, mask, expected[layer_name], inputs[layer_name],
                                   sparsity)
                raise ExerciseFailed(f"{name}: {call_text}, layer {layer_name}: {hint}")
    passed(name, "the same masks as llmlab.prune.wanda on tiny random GPT-2 (Conv1D) and Llama "
                 "(nn.Linear) models with outlier features, at 0, 30 and 60% per row")

NOTEBOOK = "06_pruning.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "global_magnitude_mask": exercise_global_magnitude_mask,
    "cubic_sparsity": exercise_cubic_sparsity,
    "shrink_pair": exercise_shrink_pair,
    "two_four_mask": exercise_two_four_mask,
    "wanda_masks": exercise_wanda_masks,
}
