"""Lab 07's checks accept correct answers in their several forms and reject likely mistakes,
each with a message that names it. (tests/test_checks.py proves they pass on the solution
notebook and say "not done yet" on the generated stub, once the notebook exists.)"""

import numpy as np
import pytest
import torch

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab07 as check
from llmlab.quant import fake_quantize, gptq, hessian, inverse_hessian_factor


def fails(check_fn, answer, match):
    with pytest.raises(ExerciseFailed, match=match):
        check_fn(answer)


def stub(*args, **kwargs):
    raise NotImplementedError("the hint")


# ---------------------------------------------------------------- Exercise 1: group-wise RTN


def rtn_groups(weight, bits, group_size, *, steps_extra=0, rounding=torch.round, widen=True,
               clamp_zero=True, round_zero=True, round_shifted=False, code_top=0,
               by_rows=False, guard_zero_range=True):  # fmt: skip
    """A learner's RTN with one switch per likely mistake (all off: a correct one)."""
    w = weight.T if by_rows else weight
    rows, cols = w.shape
    groups = w.reshape(rows, cols // group_size, group_size)
    top = 2**bits - 1
    low, high = groups.amin(-1), groups.amax(-1)
    if widen:
        low, high = low.clamp(max=0), high.clamp(min=0)
    scales = (high - low) / (top + steps_extra)
    if guard_zero_range:
        scales[scales == 0] = 1.0
    zeros = -low / scales
    if round_zero:
        zeros = zeros.round()
    if clamp_zero:
        zeros = zeros.clamp(0, top)
    if round_shifted:
        codes = rounding(groups / scales[..., None] - low[..., None] / scales[..., None])
    else:
        codes = rounding(groups / scales[..., None]) + zeros[..., None]
    codes = codes.clamp(0, top + code_top).reshape(rows, cols)
    return (codes.T if by_rows else codes).to(torch.int32), scales, zeros


def rtn_groups_numpy(weight, bits, group_size):
    """Another correct form: numpy, float codes, (rows, groups, 1) scales and zeros."""
    w = weight.numpy().astype(np.float64).reshape(weight.shape[0], -1, group_size)
    low = np.minimum(w.min(-1, keepdims=True), 0)
    high = np.maximum(w.max(-1, keepdims=True), 0)
    scale = (high - low) / (2**bits - 1)
    scale = np.where(scale > 0, scale, 1.0)
    zero = np.clip(np.round(-low / scale), 0, 2**bits - 1)
    codes = np.clip(np.round(w / scale) + zero, 0, 2**bits - 1)
    return codes.reshape(weight.shape), scale, zero


def rtn_symmetric(weight, bits, group_size, *, offset=False):
    """A symmetric grid: codes around 0 (zero point 0), or shifted by a fixed zero point."""
    groups = weight.reshape(weight.shape[0], -1, group_size)
    top = 2 ** (bits - 1) - 1
    scales = groups.abs().amax(-1) / top
    scales[scales == 0] = 1.0
    codes = (groups / scales[..., None]).round().clamp(-top, top).reshape(weight.shape)
    zeros = torch.full_like(scales, top + 1 if offset else 0)
    return codes + (top + 1 if offset else 0), scales, zeros


def test_exercise_1_accepts_right_answers_in_their_forms(capsys):
    for answer in (rtn_groups, rtn_groups_numpy, check.rtn_groups_reference):
        assert check.exercise_rtn_groups(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == 3


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(steps_extra=1), "into 16 steps"),
        (dict(steps_extra=1, code_top=1), "codes run from 0 to 16"),
        (dict(rounding=torch.floor), r"rounded down \(floor\)"),
        (dict(rounding=torch.trunc), "truncated toward zero"),
        (dict(round_shifted=True), "zero point is rounded away inside it"),
        (dict(round_zero=False), "zero points are not integers"),
        (dict(widen=False, clamp_zero=False), "zero point was not clamped"),
        (dict(widen=False), "does not reach 0"),
        (dict(by_rows=True), "groups run down the output rows"),
        (dict(guard_zero_range=False), "not finite"),
    ],
)
def test_exercise_1_rejects_likely_mistakes(switch, match):
    fails(check.exercise_rtn_groups, lambda w, b, g: rtn_groups(w, b, g, **switch), match)


def test_exercise_1_rejects_a_symmetric_grid_in_both_its_forms():
    for offset in (False, True):
        fails(check.exercise_rtn_groups, lambda w, b, g, o=offset: rtn_symmetric(w, b, g, offset=o),
              "symmetric around 0")  # fmt: skip


def test_exercise_1_rejects_wrong_shapes_and_types():
    fails(check.exercise_rtn_groups, lambda w, b, g: rtn_groups(w, b, g)[0], "return the three")
    fails(check.exercise_rtn_groups, lambda w, b, g: (w.T, *rtn_groups(w, b, g)[1:]),
          "codes of shape")  # fmt: skip

    def scales_transposed(w, b, g):
        codes, scales, zeros = rtn_groups(w, b, g)
        return codes, scales.T, zeros.T

    fails(check.exercise_rtn_groups, scales_transposed, "one per row and per group")


def test_exercise_1_on_the_stub_returns_the_fallback(capsys):
    assert check.exercise_rtn_groups(stub) is check.rtn_groups_reference
    assert "not done yet" in capsys.readouterr().out


def test_exercise_1_cases_hold_the_groups_the_mistakes_need():
    """The all-positive and constant groups are where the clamp and the range to 0 show."""
    what, weight, bits, group_size = check._rtn_cases()[0]
    groups = weight.reshape(weight.shape[0], -1, group_size)
    assert bool((groups.amin(-1) > 0).any()) and bool((groups.amax(-1) < 0).any())
    assert bool((groups == 0).all(-1).any())


# ---------------------------------------------------------------- Exercise 2: GPTQ's column loop


def gptq_columns(weight, h, quantize_column, *, factor="inverse", divide=True, sign=1.0,
                 use_column=False, in_place=False, return_updated=False):  # fmt: skip
    """A learner's column loop with one switch per likely mistake (all off: a correct one)."""
    damped = h + 0.01 * h.diagonal().mean() * torch.eye(h.shape[0])
    if factor == "inverse":
        u = inverse_hessian_factor(h)
    elif factor == "hessian":
        u = h
    elif factor == "hessian factor":
        u = torch.linalg.cholesky(damped, upper=True)
    elif factor == "inverse itself":
        u = torch.linalg.inv(damped)
    else:  # "undamped"
        u = torch.linalg.cholesky(torch.linalg.inv(h), upper=True)
    w = weight.clone()
    q = torch.zeros_like(w)
    for i in range(w.shape[1]):
        q[:, i] = quantize_column(w[:, i])
        error = w[:, i] - q[:, i]
        if divide:
            error = error / u[i, i]
        feedback = u[i:, i] if use_column else u[i, i:]
        if in_place:
            w[:, i] = q[:, i]
            w[:, i:] -= sign * torch.outer(error, feedback)
        else:
            w[:, i + 1 :] -= sign * torch.outer(error, feedback[1:])
    return w if in_place or return_updated else q


def gptq_columns_in_blocks(weight, h, quantize_column, block=8):
    """Another correct form: lazy batches, the later columns updated once per block."""
    u = inverse_hessian_factor(h).double()
    w, q = weight.double().clone(), torch.zeros_like(weight, dtype=torch.float64)
    for start in range(0, w.shape[1], block):
        end = min(start + block, w.shape[1])
        errors = torch.zeros(w.shape[0], end - start, dtype=torch.float64)
        for i in range(start, end):
            q[:, i] = quantize_column(w[:, i].float()).double()
            errors[:, i - start] = (w[:, i] - q[:, i]) / u[i, i]
            w[:, i + 1 : end] -= errors[:, i - start, None] * u[i, i + 1 : end]
        w[:, end:] -= errors @ u[start:end, end:]
    return q


def gptq_columns_whole_rows(weight, h, quantize_column):
    """Another correct form: the whole row of u each time (zero left of the diagonal), q kept
    apart from w, so updating the columns already done changes nothing."""
    u = inverse_hessian_factor(h)
    w, q = weight.clone(), []
    for i in range(w.shape[1]):
        q.append(quantize_column(w[:, i]))
        w -= torch.outer((w[:, i] - q[-1]) / u[i, i], u[i])
    return torch.stack(q, dim=1)


def test_exercise_2_accepts_right_answers_in_their_forms(capsys):
    answers = (gptq_columns, gptq_columns_in_blocks, gptq_columns_whole_rows,
               check.gptq_columns_reference)  # fmt: skip
    for answer in answers:
        assert check.exercise_gptq_columns(answer) is answer
    out = capsys.readouterr().out
    assert out.count("PASSED") == len(answers) and "of RTN's" in out


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(divide=False), r"not divided by u\[i, i\]"),
        (dict(sign=0.0), "round-to-nearest's: no rounding error reached"),
        (dict(use_column=True), "its row i and its column i"),
        (dict(in_place=True), "already quantized were changed again"),
        (dict(sign=-1.0), "wrong sign"),
        (dict(factor="hessian"), "Hessian H itself"),
        (dict(factor="hessian factor"), "Cholesky factor of H, not of its inverse"),
        (dict(factor="inverse itself"), r"H\^-1 itself"),
        (dict(factor="undamped"), "without damping"),
        (dict(return_updated=True), "not on the quantization grid"),
    ],
)
def test_exercise_2_rejects_likely_mistakes(switch, match):
    fails(check.exercise_gptq_columns, lambda w, h, qc: gptq_columns(w, h, qc, **switch), match)


def test_exercise_2_says_what_quantize_column_takes_and_what_to_return():
    fails(check.exercise_gptq_columns, lambda w, h, qc: qc(w), "give it one column")
    fails(check.exercise_gptq_columns, lambda w, h, qc: gptq_columns(w, h, qc).T,
          "return the dequantized weight")  # fmt: skip


def test_exercise_2_on_the_stub_returns_the_fallback(capsys):
    assert check.exercise_gptq_columns(stub) is check.gptq_columns_reference
    assert "not done yet" in capsys.readouterr().out


def test_exercise_2_layers_are_ones_where_gptq_clearly_beats_rtn():
    for _, weight, x, bits in check._gptq_cases():
        h = hessian([x])
        q = gptq(weight, h, bits, group_size=weight.shape[1]).dequantize()
        rtn = check._rounded(weight, check.column_quantizer(weight, bits))
        assert check._output_error(weight, q, x) < 0.7 * check._output_error(weight, rtn, x)


# ---------------------------------------------------------------- Exercise 3: the STE


def own_fake_quant(weight, bits, group_size, *, round_fn=torch.round, grid_graph=True):
    """A learner's own asymmetric fake quantization in torch ops: the graph goes through
    round_fn, and through the grid's range (min, max) unless grid_graph is False."""
    groups = weight.reshape(weight.shape[0], -1, group_size)
    source = groups if grid_graph else groups.detach()
    top = 2**bits - 1
    low = source.amin(-1, keepdim=True).clamp(max=0)
    high = source.amax(-1, keepdim=True).clamp(min=0)
    scale = (high - low) / top
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.round(-low / scale).clamp(0, top)
    codes = (round_fn(groups / scale) + zero).clamp(0, top)
    return ((codes - zero) * scale).reshape(weight.shape)


def round_ste(x):
    """round going forward, the identity going back."""
    return x + (torch.round(x) - x).detach()


def ste_detach(weight, bits, group_size):
    return weight + (fake_quantize(weight, bits, granularity=group_size) - weight).detach()


def ste_detach_other_way(weight, bits, group_size):
    return fake_quantize(weight, bits, granularity=group_size) + weight - weight.detach()


class RoundStraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, bits, group_size):
        return fake_quantize(weight, bits, symmetric=False, granularity=group_size)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


def ste_function(weight, bits, group_size):
    return RoundStraightThrough.apply(weight, bits, group_size)


def ste_own_round(weight, bits, group_size):
    """Another correct form: a straight-through round inside the learner's own grid, fit on
    the detached weight."""
    return own_fake_quant(weight, bits, group_size, round_fn=round_ste, grid_graph=False)


def test_exercise_3_accepts_right_answers_in_their_forms(capsys):
    answers = (ste_detach, ste_detach_other_way, ste_function, ste_own_round,
               check.fake_quant_ste_reference)  # fmt: skip
    for answer in answers:
        assert check.exercise_straight_through(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == len(answers)


def quantized(w, b, g):
    return fake_quantize(w, b, granularity=g)


def ste_on_grid(weight, bits, granularity, symmetric=False):
    """The straight-through trick on another grid than the exercise's."""
    q = fake_quantize(weight, bits, symmetric=symmetric, granularity=granularity)
    return q + weight - weight.detach()


def in_place(w, b, g):
    w.data.copy_(quantized(w, b, g))
    return w


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        # rounding differentiated as it is, with and without the grid's range in the graph
        (lambda w, b, g: own_fake_quant(w, b, g), "reaches weight is zero"),
        (lambda w, b, g: own_fake_quant(w, b, g, grid_graph=False), "reaches weight is zero"),
        (lambda w, b, g: w + (quantized(w, b, g).detach() - w), "reaches weight is zero"),
        # no graph at all
        (quantized, "carries no graph"),
        (lambda w, b, g: ste_detach(w.detach(), b, g), "carries no graph"),
        (lambda w, b, g: ste_detach(w, b, g).detach(), "carries no graph"),
        (lambda w, b, g: quantized(w, b, g).requires_grad_(), "does not reach weight"),
        # the forward not quantized
        (lambda w, b, g: w, "the float weight's own values"),
        (lambda w, b, g: w * 1.0, "the float weight's own values"),
        (lambda w, b, g: quantized(w, b, g) + (w - quantized(w, b, g)).detach(),
         "the float weight's own values"),
        # the detach on the wrong term
        (lambda w, b, g: w.detach() + (quantized(w, b, g) - w), "sign flipped"),
        (lambda w, b, g: w + (ste_own_round(w, b, g) - w.detach()), "twice the incoming"),
        (lambda w, b, g: w + (own_fake_quant(w, b, g) - w.detach()),
         "except at each group's smallest and largest"),
        (lambda w, b, g: 0.5 * w + (quantized(w, b, g) - 0.5 * w).detach(), "differs from the "
         "incoming one by up to"),
        # the wrong grid, or the weight overwritten
        (lambda w, b, g: ste_on_grid(w, b, g, symmetric=True), "symmetric around 0"),
        (lambda w, b, g: ste_on_grid(w, b, "channel"), "one grid per row"),
        (lambda w, b, g: ste_detach(w, b, g) + 0.01, "are not llmlab.quant.fake_quantize"),
        (in_place, "changed weight itself"),
        (lambda w, b, g: ste_detach(w, b, g).tolist(), "returned list"),
        (lambda w, b, g: ste_detach(w, b, g).T, "of the weight's shape"),
    ],
)  # fmt: skip
def test_exercise_3_rejects_likely_mistakes(answer, match):
    fails(check.exercise_straight_through, answer, match)


def test_exercise_3_on_the_stub_returns_the_fallback(capsys):
    fallback = check.exercise_straight_through(stub)
    assert fallback is check.fake_quant_ste_reference
    assert "not done yet" in capsys.readouterr().out
    weight = torch.randn(4, 16, requires_grad=True)
    fallback(weight, 4, 8).sum().backward()
    assert torch.equal(weight.grad, torch.ones_like(weight))


def test_exercise_3_mistakes_differ_where_the_check_looks():
    """Each case's symmetric, per-row and group-wise grids give different values, and the
    naive fake quantization's gradient is non-zero only at groups' ends (so the check must
    look inside the groups to call it zero)."""
    for _, weight, bits, group_size, incoming in check._ste_cases():
        right = fake_quantize(weight, bits, granularity=group_size)
        for wrong in (weight, fake_quantize(weight, bits, symmetric=True, granularity=group_size),
                      fake_quantize(weight, bits)):  # fmt: skip
            assert not torch.allclose(wrong, right, atol=1e-4)
        leaf = weight.clone().requires_grad_()
        (gradient,) = torch.autograd.grad(own_fake_quant(leaf, bits, group_size), leaf, incoming)
        assert 0 < int((gradient != 0).sum()) <= 2 * weight.numel() // group_size


# ---------------------------------------------------------------- Prediction: bits per weight


def test_bits_per_weight_prediction_shows_guess_and_count(capsys):
    assert check.prediction_bits_per_weight(4.0) == pytest.approx(4 + 16 / 128 + 4 / 128)
    assert "you predicted 4 bits per weight, measured 4.156" in capsys.readouterr().out
    check.prediction_bits_per_weight(...)  # the generated stub's `NAME = ...`
    assert "No prediction was written" in capsys.readouterr().out
