"""Lab 06's checks accept correct answers in their several forms and reject likely mistakes, each
with a message that points at the mistake. (tests/course/checks/test_every_lab.py proves they
pass on the solution notebook and say "not done yet" on the generated stub, once the notebook
exists.)"""

import copy
import math

import numpy as np
import pytest
import torch
from helpers.checks import BUG_NAMED, buggy, fails
from torch import nn

from llmlab.course.checks import lab06 as check

# ---------------------------------------------------------------- Exercise 1: global magnitude


def global_mask(weights, sparsity, *, per_layer=False, largest=False, k_shift=0, ties="rank",
                count=round):
    """A learner's global mask with one switch per likely mistake (all off: a correct one)."""
    groups = [[w] for w in weights] if per_layer else [weights]
    masks = []
    for group in groups:
        scores = torch.cat([w.abs().flatten() for w in group])
        scores = -scores if largest else scores
        k = count(sparsity * scores.numel()) + k_shift
        if k <= 0:
            keep = torch.ones_like(scores, dtype=torch.bool)
        elif ties == "rank":  # the threshold, then exactly k: ties broken by position
            threshold = scores.kthvalue(k).values
            below = scores < threshold
            at = (scores == threshold).nonzero().flatten()[: k - int(below.sum())]
            keep = ~below
            keep[at] = False
        elif ties == "<=":  # a bare threshold at the k-th value prunes every weight tied with it
            keep = scores > scores.kthvalue(k).values
        else:  # "<" the (k+1)-th value: exactly k without ties, fewer when they tie
            keep = scores >= scores.kthvalue(k + 1).values
        masks += list(keep.split([w.numel() for w in group]))
    return [m.view(w.shape) for m, w in zip(masks, weights, strict=True)]


def global_mask_by_quantile_and_sort(weights, sparsity):
    """Another correct form: argsort of all magnitudes, float 0/1 masks, a tuple."""
    flat = torch.cat([w.abs().flatten() for w in weights])
    k = int(np.round(sparsity * flat.numel()))
    keep = torch.ones_like(flat)
    keep[flat.argsort(stable=True)[:k]] = 0.0
    return tuple(part.view(w.shape) for part, w in zip(keep.split([w.numel() for w in weights]),
                                                        weights, strict=True))


def global_mask_as_numpy(weights, sparsity):
    """Another correct form: numpy bool arrays."""
    return [mask.numpy() for mask in global_mask(weights, sparsity)]


def test_exercise_1_accepts_right_masks_in_their_forms(capsys):
    answers = (global_mask, global_mask_by_quantile_and_sort, global_mask_as_numpy,
               check.global_magnitude_mask_reference)
    for answer in answers:
        assert check.exercise_global_magnitude_mask(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == len(answers)


def test_exercise_1_equals_torch_prune_where_nothing_ties():
    for what, weights, sparsity in check._global_cases():
        if "ties" not in what:
            library = check._library_masks(weights, sparsity)
            for mine, theirs in zip(global_mask(weights, sparsity), library, strict=True):
                assert torch.equal(mine, theirs)


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(per_layer=True), "layer-wise pruning"),
        (dict(largest=True), "largest weights were pruned"),
        (dict(k_shift=-1), "pruned, expected round"),
        (dict(k_shift=1), "pruned, expected round"),
        (dict(count=math.ceil), "rounded up"),
        (dict(count=int), "rounded down"),
        (dict(ties="<="), "share the value at the threshold"),
        (dict(ties="<"), "share the value at the threshold"),
    ],
)
def test_exercise_1_rejects_likely_mistakes(switch, match):
    fails(check.exercise_global_magnitude_mask, lambda w, s: global_mask(w, s, **switch), match)


def test_exercise_1_rejects_inverted_masks_and_wrong_types():
    def inverted(w, s):
        return [~m for m in global_mask(w, s)]

    fails(check.exercise_global_magnitude_mask, inverted, "True (means keep|for the weights it)")
    fails(check.exercise_global_magnitude_mask, lambda w, s: global_mask(w, s)[0], "return a list")

    def without_abs(w, s):
        return global_mask([x.clone() + 10 for x in w], s)  # ranks w, not |w|

    fails(check.exercise_global_magnitude_mask, without_abs, "smaller in magnitude")


# ---------------------------------------------------------------- Exercise 2: cubic schedule


def cubic(step, final, start, end, initial_sparsity=0.0, *, power_on="remaining", before="dense",
          after=True, linear=False, use_initial=True, inclusive_start=False):
    initial = initial_sparsity if use_initial else 0.0
    if before and (step <= start if inclusive_start else step < start):
        return initial if before == "initial" else 0
    progress = (step - start) / (end - start)
    if after:
        progress = min(progress, 1.0)
    if linear:
        return initial + (final - initial) * progress
    if power_on == "done":
        return initial + (final - initial) * progress**3
    return np.float32(final + (initial - final) * (1 - progress) ** 3)  # any real type


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(linear=True), "straight line"),
        (dict(power_on="done"), "starts slowly"),
        (dict(before=False), "still dense"),
        (dict(before="initial"), r"still dense \(0\): the initial sparsity"),
        (dict(inclusive_start=True), "strict"),
        (dict(after=False), "final sparsity is held"),
        (dict(use_initial=False), "does the initial sparsity enter"),
    ],
)
def test_exercise_2_rejects_likely_mistakes(switch, match):
    fails(check.exercise_cubic_sparsity, lambda *a, **k: cubic(*a, **k, **switch), match)


def test_exercise_2_accepts_the_schedule_and_rejects_one_that_ignores_start_step(capsys):
    assert check.exercise_cubic_sparsity(cubic) is cubic
    assert "PASSED" in capsys.readouterr().out

    def starts_at_zero(step, final, start, end, initial_sparsity=0.0):  # ignores start_step
        return cubic(step, final, 0, end, initial_sparsity)

    fails(check.exercise_cubic_sparsity, starts_at_zero, "expected")


# ---------------------------------------------------------------- Exercise 3: shrink a pair


def shrink(first, second, keep, *, second_dim=1, first_bias=True, invert=False):
    """A learner's shrink with one switch per likely mistake (all off: a correct one)."""
    if invert:
        alive = torch.ones(first.out_features, dtype=torch.bool)
        alive[keep] = False
        keep = alive.nonzero().flatten()
    new_first = nn.Linear(first.in_features, len(keep), bias=first.bias is not None and first_bias)
    weight2 = second.weight[:, keep] if second_dim == 1 else second.weight[keep, :]
    new_second = nn.Linear(weight2.shape[1], weight2.shape[0], bias=second.bias is not None)
    with torch.no_grad():
        new_first.weight.copy_(first.weight[keep])
        if new_first.bias is not None:
            new_first.bias.copy_(first.bias[keep])
        new_second.weight.copy_(weight2)
        if second.bias is not None:  # slicing the wrong dimension slices the bias with it
            new_second.bias.copy_(second.bias if second_dim == 1 else second.bias[keep])
    return new_first, new_second


def shrink_in_place(first, second, keep):
    """Another correct form: the same modules, their parameters replaced."""
    first.weight = nn.Parameter(first.weight.detach()[keep])
    if first.bias is not None:
        first.bias = nn.Parameter(first.bias.detach()[keep])
    second.weight = nn.Parameter(second.weight.detach()[:, keep])
    first.out_features = second.in_features = len(keep)
    return [first, second]


def test_exercise_3_accepts_right_answers(capsys):
    for answer in (shrink, shrink_in_place, check.shrink_pair_reference):
        assert check.exercise_shrink_pair(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == 3


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(second_dim=0), "sliced along its outputs"),
        (dict(first_bias=False), "bias must be kept"),
        (dict(invert=True), "those not in `keep`"),
    ],
)
def test_exercise_3_rejects_likely_mistakes(switch, match):
    fails(check.exercise_shrink_pair, lambda f, s, k: shrink(f, s, k, **switch), match)


def test_exercise_3_rejects_a_bias_left_behind_and_a_scrambled_pairing():
    def bias_not_copied(first, second, keep):
        new_first, new_second = shrink(first, second, keep)
        nn.init.zeros_(new_first.bias)
        return new_first, new_second

    fails(check.exercise_shrink_pair, bias_not_copied, "bias was not carried over")

    def unpaired(first, second, keep):
        new_first, new_second = shrink(first, second, keep)
        with torch.no_grad():
            new_second.weight.copy_(new_second.weight.flip(1))
        return new_first, new_second

    fails(check.exercise_shrink_pair, unpaired, "same unit's column")
    fails(check.exercise_shrink_pair, lambda f, s, k: (copy.deepcopy(f), s), "nothing was removed")


# ---------------------------------------------------------------- Exercise 4: 2:4


def two_four(weight, dim, *, smallest=False, flatten=False, wrong_dim=False):
    """A learner's 2:4 mask with one switch per likely mistake (all off: a correct one)."""
    dim = (1 - dim % 2) if wrong_dim else dim
    moved = weight.abs() if flatten else weight.abs().movedim(dim, -1)
    groups = moved.reshape(-1, 4)
    order = groups.argsort(dim=1, descending=not smallest)
    keep = torch.zeros_like(groups)
    keep.scatter_(1, order[:, :2], 1.0)
    keep = keep.reshape(moved.shape)
    return keep if flatten else keep.movedim(-1, dim)


def test_exercise_4_accepts_right_answers(capsys):
    answers = (two_four, lambda w, d: two_four(w, d).bool().numpy(), check.two_four_mask_reference)
    for answer in answers:
        assert check.exercise_two_four_mask(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == len(answers)


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(wrong_dim=True), "wrong dimension"),
        (dict(smallest=True), "2 smallest"),
        (dict(flatten=True), "flattened tensor"),
    ],
)
def test_exercise_4_rejects_likely_mistakes(switch, match):
    fails(check.exercise_two_four_mask, lambda w, d: two_four(w, d, **switch), match)


def test_exercise_4_rejects_unstructured_half_and_uneven_groups():
    def half(weight, dim):
        return weight.abs() > weight.abs().median()  # 50 % of the tensor, not per group

    fails(check.exercise_two_four_mask, half, "unstructured 50%|keeps")

    def three_of_four(weight, dim):
        mask = two_four(weight, dim).bool()
        mask.movedim(dim, -1)[..., 0] = True  # a third entry kept in some groups
        return mask

    fails(check.exercise_two_four_mask, three_of_four, "exactly 2")


def test_the_checks_say_not_done_and_hand_back_the_fallback(capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError("build it")

    assert check.exercise_global_magnitude_mask(stub) is check.global_magnitude_mask_reference
    assert check.exercise_two_four_mask(stub) is check.two_four_mask_reference
    assert "not done yet" in capsys.readouterr().out


# ---------------------------------------------------------------- Exercise 5: Wanda's masks


def wanda(model, layers, batches, sparsity, *, norms="l2", reduce="sum", row="output",
          count=int, lowest=True, remove_hooks=True, layout="input_dim", prune_model=False,
          as_numpy=False):
    """A learner's Wanda with one switch per likely mistake (all at their defaults: correct)."""
    seen = {name: [] for name in layers}

    def recorder(name):
        def record(module, args, output):
            x = (output if norms == "output" else args[0]).detach()
            seen[name].append(x.reshape(-1, x.shape[-1]).double())

        return record

    hooks = [layer.register_forward_hook(recorder(name)) for name, layer in layers.items()]
    with torch.no_grad():
        for batch in batches:
            model(batch)
    if remove_hooks:
        for hook in hooks:
            hook.remove()
    masks = {}
    for name, layer in layers.items():
        xs = seen[name][-1:] if norms == "last batch" else seen[name]
        x = torch.cat(xs)
        norm = {"l1": x.abs().sum(0), "squares": x.pow(2).sum(0), "ones": torch.ones(x.shape[1])
                }.get(norms, x.pow(2).mean(0).sqrt() if reduce == "mean" else x.norm(dim=0))
        dim = 1 if layout == "linear" else check.input_dim(layer)
        scores = layer.weight.detach().abs().movedim(dim, -1) * norm.float()
        if row == "input":  # rank within each input column instead of each output row
            scores = scores.movedim(-1, 0)
        k = count(sparsity * scores.shape[-1])
        keep = torch.ones_like(scores, dtype=torch.bool)
        if row == "matrix":  # one ranking over the whole matrix: rows lose different numbers
            keep = check.smallest_mask(scores, k * scores.shape[0] / scores.numel())
        elif k:
            keep.scatter_(-1, scores.topk(k, dim=-1, largest=not lowest).indices, False)
        if row == "input":
            keep = keep.movedim(0, -1)
        masks[name] = keep.movedim(-1, dim)
        if prune_model:  # "while I am at it": the weights are zeroed in place
            with torch.no_grad():
                layer.weight.mul_(masks[name])
    return {n: m.numpy() for n, m in masks.items()} if as_numpy else masks


def test_exercise_5_accepts_right_answers_in_their_forms(capsys):
    answers = (wanda, lambda *a: wanda(*a, reduce="mean"), lambda *a: wanda(*a, as_numpy=True),
               check.wanda_masks_reference)
    for answer in answers:
        assert check.exercise_wanda_masks(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == len(answers)


def test_exercise_5_cases_are_where_wanda_and_magnitude_differ():
    """Every layer of every case with something to prune gets another mask from Wanda than from
    magnitude per row, so a check passing magnitude masks would be an empty one."""
    for seed, (_, shape, sparsity) in enumerate(check.WANDA_CASES):
        model, batches = check._wanda_model(shape, seed)
        layers = check.prunable_weights(model)
        wanda_masks = check.wanda_masks_reference(model, layers, batches, sparsity)
        magnitude = wanda(model, layers, batches, sparsity, norms="ones")
        assert all(torch.equal(wanda_masks[n], magnitude[n]) == (sparsity == 0) for n in layers)


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(norms="ones"), "magnitude masks"),
        (dict(norms="l1"), "L1 norm"),
        (dict(norms="squares"), "not its square root"),
        (dict(norms="last batch"), "one calibration batch"),
        (dict(row="input"), "within each input column"),
        (dict(row="matrix"), "Wanda ranks the weights of each output row"),
        (dict(count=round), r"int\(sparsity \* inputs\) = 4"),
        (dict(lowest=False), "highest scores were pruned"),
        (dict(remove_hooks=False), "left hooks"),
        (dict(prune_model=True), "changed the model's weights"),
    ],
)
def test_exercise_5_rejects_likely_mistakes(switch, match):
    fails(check.exercise_wanda_masks, lambda *a: wanda(*a, **switch), match)


def test_exercise_5_rejects_an_inverted_mask_and_cannot_pass_wrong_norms_or_layouts():
    fails(check.exercise_wanda_masks, lambda *a: {n: ~m for n, m in wanda(*a).items()},
          "opposite of Wanda's")
    # Norms of the outputs, or GPT-2's (in, out) weight read as nn.Linear's (out, in): the
    # learner's own code stops, at the first layer whose sizes do not fit, and the check names it.
    for switch in (dict(norms="output"), dict(layout="linear")):
        fails(check.exercise_wanda_masks, lambda *a, switch=switch: wanda(*a, **switch),
              r"wanda_masks\(<tiny random GPT-2>.* raised RuntimeError: .*must match the size")


def test_exercise_5_says_what_to_return():
    fails(check.exercise_wanda_masks, lambda *a: list(wanda(*a).values()), "return a dict")
    fails(check.exercise_wanda_masks, lambda m, layers, b, s: {n: "keep" for n in layers},
          "return a tensor")


@pytest.mark.parametrize("exercise", list(check.EXERCISES.values()),
                         ids=list(check.EXERCISES))
def test_an_error_in_an_answer_is_named_with_its_input(exercise):
    fails(exercise, buggy, BUG_NAMED)
