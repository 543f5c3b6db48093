"""Checks for Lab 07 (4-bit quantization), and the versions the lab falls back to.

Exercise 1 is checked against llmlab.quant.rtn, exercise 2 against llmlab.quant.gptq. Both
compare dequantized weights (codes, scales and zeros may come in any dtype), and when they
differ the check recomputes each likely mistake and names the one the answer matches.
Exercise 3 (the straight-through estimator) compares the forward values with
llmlab.quant.fake_quantize and the gradient that reaches the weight with the incoming one; a
wrong gradient is named by how it relates to the incoming one (zero, flipped, doubled).
"""

from collections.abc import Callable

import torch

from llmlab.course.checks import ExerciseFailed, call, compare_prediction, exercise, passed
from llmlab.quant import (
    bits_per_weight,
    fake_quantize,
    fit_grid,
    gptq,
    hessian,
    inverse_hessian_factor,
    rtn,
    to_codes,
)
from llmlab.quant.qat import StraightThrough

# ---------------------------------------------------------------- Exercise 1: group-wise RTN


def rtn_groups_reference(weight: torch.Tensor, bits: int, group_size: int):
    """The lab's fallback for Exercise 1: (codes, scales, zeros) of llmlab.quant.rtn."""
    q = rtn(weight, bits, group_size)
    return q.codes, q.scales, q.zeros


def _dequantized(codes, scales, zeros, group_size: int) -> torch.Tensor:
    """(codes - zeros) * scales, with one scale and zero per group of `group_size` columns."""
    rows, cols = codes.shape
    grouped = codes.double().reshape(rows, cols // group_size, group_size)
    return ((grouped - zeros.double()[..., None]) * scales.double()[..., None]).reshape(rows, cols)


def _mistaken_grid(
    weight, bits, group_size, *, levels=None, rounding=torch.round, widen=True, clamp_zero=True,
    round_shifted=False,
) -> torch.Tensor:
    """The dequantized weight of an asymmetric grid built with one likely mistake."""
    high = 2**bits - 1
    values = weight.double().reshape(weight.shape[0], -1, group_size)
    vmin, vmax = values.amin(-1, keepdim=True), values.amax(-1, keepdim=True)
    if widen:  # the range must hold 0, as fit_grid makes it
        vmin, vmax = vmin.clamp(max=0), vmax.clamp(min=0)
    scale = (vmax - vmin) / (levels or high)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.round(-vmin / scale)
    zero = zero.clamp(0, high) if clamp_zero else zero
    if round_shifted:  # the zero point's fraction went into the rounding
        codes = rounding(values / scale - vmin / scale)
    else:
        codes = rounding(values / scale) + zero
    return ((codes.clamp(0, high) - zero) * scale).reshape(weight.shape)


def _rtn_mistakes(weight, bits, group_size) -> list[tuple[torch.Tensor, str]]:
    levels = 2**bits
    return [
        (fake_quantize(weight, bits, symmetric=True, granularity=group_size).double(),
         "your grid is symmetric around 0 (a scale from max |w|, no zero point of its own): "
         "the asymmetric grid spans each group's own range. Where do min and max come in?"),
        (_mistaken_grid(weight, bits, group_size, levels=levels),
         f"your scale divides the range into {levels} steps: how many steps lie between the "
         f"{levels} codes 0 and {levels - 1}?"),
        (_mistaken_grid(weight, bits, group_size, rounding=torch.floor),
         "your codes are rounded down (floor): round to the nearest code instead."),
        (_mistaken_grid(weight, bits, group_size, rounding=torch.trunc),
         "your codes are truncated toward zero (int() or a cast): round to the nearest code."),
        (_mistaken_grid(weight, bits, group_size, round_shifted=True),
         "your codes round w / scale + (-min / scale) as one number, so the zero point is "
         "rounded away inside it: the weights do not land on their nearest grid point. Which "
         "part of the code is already an integer before you round?"),
        (_mistaken_grid(weight, bits, group_size, widen=False, clamp_zero=False),
         f"your zero point was not clamped: in a group whose values are all positive (or all "
         f"negative) it falls outside the codes' range [0, {levels - 1}], where {bits} bits "
         "cannot store it. Clamping it alone would cut off part of the group: which range "
         "does llmlab.quant.fit_grid make the grid span?"),
        (_mistaken_grid(weight, bits, group_size, widen=False),
         "in a group whose values are all positive (or all negative) your grid does not reach "
         "0 and the clamped zero point cuts part of the group off. Which range does "
         "llmlab.quant.fit_grid make the grid span, and why must it hold 0?"),
    ]  # fmt: skip


def _rtn_cases() -> list[tuple[str, torch.Tensor, int, int]]:
    """Random weights; the first two with special groups planted in them."""
    generator = torch.Generator().manual_seed(7)
    cases = []
    for rows, cols, bits, group_size, special in ((16, 32, 4, 8, True), (24, 48, 3, 12, True),
                                                  (32, 64, 4, 16, False)):  # fmt: skip
        weight = torch.randn(rows, cols, generator=generator) * 0.05
        what = f"random weight {rows}x{cols}"
        if special:
            g = group_size
            weight[0, 3] = 1.5  # an outlier stretches its group's grid
            weight[1, g : 2 * g] = weight[1, g : 2 * g].abs() + 0.02  # all positive
            weight[2, :g] = 0.37  # constant
            weight[3, 2 * g : 3 * g] = -0.6  # constant, negative
            weight[4, g : 2 * g] = 0.0  # all zero
            weight[5, :g] = -weight[5, :g].abs() - 0.01  # all negative
            what += " with an outlier, all-positive, all-negative, constant and all-zero groups"
        cases.append((what, weight, bits, group_size))
    return cases


def _as_tensor(name, call_text, what, got) -> torch.Tensor:
    try:
        return torch.as_tensor(got).detach().cpu()
    except (TypeError, ValueError, RuntimeError):
        raise ExerciseFailed(f"{name}: {call_text} returned {what} as a {type(got).__name__}; "
                             "return tensors.") from None  # fmt: skip


def _per_group(name, call_text, what, got: torch.Tensor, rows: int, groups: int):
    """`got` as (rows, groups): (rows, groups, 1) and, with one group, (rows,) are fine too."""
    squeezed = [d for d in got.shape if d != 1]
    if got.numel() != rows * groups or squeezed != [d for d in (rows, groups) if d != 1]:
        raise ExerciseFailed(
            f"{name}: {call_text} returned {what} of shape {tuple(got.shape)}, expected "
            f"({rows}, {groups}): one per row and per group of input columns."
        )
    return got.reshape(rows, groups)


def _rtn_malformed(codes, scales, zeros, bits) -> str | None:
    """What is wrong with the numbers themselves (None: finite, integer codes and zero points
    inside the code range)."""
    high = 2**bits - 1
    if not (bool(torch.isfinite(scales).all()) and bool(torch.isfinite(zeros).all())):
        return ("a scale or zero point is not finite: a group whose values are all equal (or "
                "all 0) has a range of 0. What scale can such a group use?")  # fmt: skip
    if codes.min() < 0 or codes.max() > high:
        return (f"your codes run from {codes.min().item():g} to {codes.max().item():g}; "
                f"{bits} bits hold the {high + 1} codes 0 to {high}.")  # fmt: skip
    if not bool((codes == codes.round()).all()):
        return "your codes are not integers: round them."
    if not bool((zeros == zeros.round()).all()):
        return ("your zero points are not integers: a zero point is stored as a code, and "
                "only an integer one puts 0.0 exactly on the grid.")  # fmt: skip
    if zeros.min() < 0 or zeros.max() > high:
        return (f"your zero points run from {zeros.min().item():g} to {zeros.max().item():g}, "
                f"outside the codes' range [0, {high}]: clamp them.")  # fmt: skip
    return None


@exercise(
    fallback=rtn_groups_reference, fallback_name="llmlab.course.checks.lab07.rtn_groups_reference"
)
def exercise_rtn_groups(rtn_groups) -> None:
    """Exercise 1: rtn_groups(weight, bits, group_size) -> (codes, scales, zeros): group-wise
    asymmetric round-to-nearest; dequantized weight = (codes - zeros) * scales."""
    name = "Exercise 1 (group-wise RTN)"
    for what, weight, bits, group_size in _rtn_cases():
        rows, cols = weight.shape
        call_text = f"rtn_groups(<{what}>, bits={bits}, group_size={group_size})"
        got = call(name, rtn_groups, weight.clone(), bits, group_size)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise ExerciseFailed(f"{name}: {call_text} returned a {type(got).__name__}; return "
                                 "the three tensors (codes, scales, zeros).")  # fmt: skip
        codes, scales, zeros = (_as_tensor(name, call_text, part, value) for part, value
                                in zip(("codes", "scales", "zeros"), got, strict=True))  # fmt: skip
        if tuple(codes.shape) != (rows, cols):
            raise ExerciseFailed(f"{name}: {call_text} returned codes of shape "
                                 f"{tuple(codes.shape)}, expected the weight's "
                                 f"({rows}, {cols}): one code per weight.")  # fmt: skip
        codes = codes.double()
        if rows % group_size == 0 and torch.equal(
            codes, rtn(weight.T.contiguous(), bits, group_size).codes.T.double()
        ):
            raise ExerciseFailed(f"{name}: {call_text}: your groups run down the output rows: "
                                 "a group is group_size consecutive input columns of one row, "
                                 "the values one dot product sums over.")  # fmt: skip
        groups = cols // group_size
        scales = _per_group(name, call_text, "scales", scales, rows, groups).double()
        zeros = _per_group(name, call_text, "zeros", zeros, rows, groups).double()
        reference = rtn(weight, bits, group_size)
        steps = reference.scales.double().repeat_interleave(group_size, 1)
        mine = _dequantized(codes, scales, zeros, group_size)

        def same(a: torch.Tensor, b: torch.Tensor, steps=steps) -> bool:
            return bool(((a - b).abs() <= 1e-3 * steps).all())  # within a thousandth of a step

        malformed = _rtn_malformed(codes, scales, zeros, bits)
        if malformed is None and same(mine, reference.dequantize().double()):
            continue
        hint = next((text for wrong, text in _rtn_mistakes(weight, bits, group_size)
                     if same(mine, wrong)), malformed)  # fmt: skip
        hint = hint or ("compare yours with llmlab.quant.rtn on a small weight: which group "
                        "differs first, and is it its scale, its zero point or its codes?")
        raise ExerciseFailed(f"{name}: {call_text}: {hint}")
    passed(name, "the same dequantized weights as llmlab.quant.rtn at 3 and 4 bits, outliers, "
                 "one-signed, constant and all-zero groups included")  # fmt: skip


# ---------------------------------------------------------------- Exercise 2: GPTQ's column loop


def column_quantizer(weight: torch.Tensor, bits: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """quantize_column(column) -> that column rounded to its rows' grids, dequantized. One
    asymmetric grid per row, fit on the unchanged weight: GPTQ with one group per row fits it
    before any column is updated (llmlab.quant.gptq with group_size = in_features)."""
    scale, zero = fit_grid(weight.detach().float(), bits, symmetric=False)

    def quantize_column(column: torch.Tensor) -> torch.Tensor:
        return (to_codes(column, scale, zero, bits, symmetric=False) - zero) * scale

    return quantize_column


def _column_loop(weight, u, quantize_column, *, divide=True, sign=1.0, in_place=False):
    """GPTQ's column loop (Algorithm 1 without lazy blocks); the switches make the mistakes."""
    w = weight.detach().float().clone()
    q = torch.zeros_like(w)
    for i in range(w.shape[1]):
        q[:, i] = quantize_column(w[:, i])
        error = (w[:, i] - q[:, i]) / (u[i, i] if divide else 1)
        if in_place:  # the quantized column kept in w, the update then reaching it too
            w[:, i] = q[:, i]
            w[:, i:] -= sign * error[:, None] * u[i, i:]
        else:
            w[:, i + 1 :] -= sign * error[:, None] * u[i, i + 1 :]
    return w if in_place else q


def gptq_columns_reference(weight: torch.Tensor, h: torch.Tensor, quantize_column):
    """The lab's fallback for Exercise 2: the column loop with llmlab.quant's factor of H^-1."""
    return _column_loop(weight, inverse_hessian_factor(h), quantize_column)


def _gptq_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, int]]:
    """Random layers whose inputs are strongly correlated (a few directions plus a little
    noise): there GPTQ's compensation pays, and its result differs clearly from RTN's."""
    generator = torch.Generator().manual_seed(70)
    cases = []
    for rows, cols, rank, bits in ((12, 32, 6, 4), (16, 24, 4, 3), (8, 48, 12, 4)):
        mixing = torch.randn(rank, cols, generator=generator)
        x = torch.randn(256, rank, generator=generator) @ mixing
        x += 0.1 * torch.randn(256, cols, generator=generator)
        weight = torch.randn(rows, cols, generator=generator) * 0.1
        cases.append((f"{rows}x{cols} layer, inputs of rank ~{rank}, {bits} bits", weight, x, bits))
    return cases


def _gptq_mistakes(weight, h, quantize_column) -> list[tuple[torch.Tensor, str]]:
    u = inverse_hessian_factor(h)
    damped = h + 0.01 * h.diagonal().mean() * torch.eye(h.shape[0])
    return [
        (_rounded(weight, quantize_column),
         "your result is round-to-nearest's: no rounding error reached the columns not yet "
         "quantized. Is there an update at all? And u is upper triangular: which of its row i "
         "and its column i is non-zero for the columns after i?"),
        (_column_loop(weight, u, quantize_column, divide=False),
         "the error is not divided by u[i, i]: how does the Optimal Brain Surgeon update scale "
         "a column's error by that column's entry of the inverse Hessian?"),
        (_column_loop(weight, u, quantize_column, sign=-1.0),
         "the update has the wrong sign: it doubles the rounding error instead of making up "
         "for it. Which way should the later columns move?"),
        (_column_loop(weight, u, quantize_column, in_place=True),
         "the columns already quantized were changed again by the update: it should reach "
         "only the columns after i (and return the quantized values)."),
        (_column_loop(weight, h, quantize_column),
         "you used the Hessian H itself: the feedback weights come from its inverse. What "
         "does llmlab.quant.inverse_hessian_factor return?"),
        (_column_loop(weight, torch.linalg.cholesky(damped, upper=True), quantize_column),
         "you used the Cholesky factor of H, not of its inverse: which matrix says how a "
         "column's error is best shared out? Read llmlab.quant.inverse_hessian_factor."),
        (_column_loop(weight, torch.linalg.inv(damped), quantize_column),
         "you used H^-1 itself: its row i is right for column i only while no column before "
         "it was quantized. Which factor of H^-1 holds the updated rows of every step at once?"),
        (_column_loop(weight, torch.linalg.cholesky(torch.linalg.inv(h), upper=True),
                      quantize_column),
         "H was inverted without damping: read llmlab.quant.inverse_hessian_factor, what does "
         "it add to H first, and why?"),
    ]  # fmt: skip


def _rounded(weight, quantize_column) -> torch.Tensor:
    """Every column rounded on its own, nothing fed back: round-to-nearest."""
    return torch.stack([quantize_column(weight[:, i]) for i in range(weight.shape[1])], 1)


def _output_error(weight, q, x) -> float:
    return float(torch.linalg.matrix_norm((weight - q) @ x.T))


@exercise(
    fallback=gptq_columns_reference,
    fallback_name="llmlab.course.checks.lab07.gptq_columns_reference",
)
def exercise_gptq_columns(gptq_columns) -> None:
    """Exercise 2: gptq_columns(weight, h, quantize_column) -> the dequantized weight GPTQ
    chooses, column by column, spreading each column's rounding error over the later ones."""
    name = "Exercise 2 (GPTQ's column loop)"
    ratios = []
    for what, weight, x, bits in _gptq_cases():
        rows, cols = weight.shape
        h = hessian([x])
        grid = column_quantizer(weight, bits)

        def quantize_column(column, rows=rows, grid=grid):
            if tuple(getattr(column, "shape", ())) != (rows,):
                raise ExerciseFailed(f"{name}: quantize_column was given shape "
                                     f"{tuple(getattr(column, 'shape', ()))}: give it one column "
                                     f"of the weight, w[:, i], shape ({rows},).")  # fmt: skip
            return grid(column)

        call_text = f"gptq_columns(<{what}>, h, quantize_column)"
        got = call(name, gptq_columns, weight.clone(), h.clone(), quantize_column)
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (rows, cols):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise ExerciseFailed(f"{name}: {call_text} returned {shape}; return the dequantized "
                                 f"weight, a tensor of shape ({rows}, {cols}).")  # fmt: skip
        got = got.detach().float().cpu()
        expected = gptq(weight, h, bits, group_size=cols).dequantize()
        rtn_error = _output_error(weight, _rounded(weight, grid), x)
        if torch.allclose(got, expected, rtol=0, atol=1e-5):
            ratios.append(_output_error(weight, got, x) / rtn_error)
            continue
        hint = next((text for wrong, text in _gptq_mistakes(weight, h, grid)
                     if torch.allclose(got, wrong, rtol=0, atol=1e-5)), None)  # fmt: skip
        if hint is None:
            off_grid = not torch.allclose(got, _rounded(got, grid), rtol=0, atol=1e-5)
            hint = ("your result is not on the quantization grid: return the quantized "
                    "columns (what quantize_column gave), not the updated weights."
                    if off_grid else
                    "your result is on the grid but not GPTQ's: run yours and "
                    "llmlab.quant.gptq side by side on a small layer; which column differs "
                    "first?")  # fmt: skip
        error = _output_error(weight, got, x)
        raise ExerciseFailed(f"{name}: {call_text}: output error ||(W - Q) X|| is {error:.4g}, "
                             f"RTN's is {rtn_error:.4g}. {hint}")  # fmt: skip
    passed(name, "the same weights as llmlab.quant.gptq on 3 layers at 3 and 4 bits; output "
                 f"error {min(ratios):.0%} to {max(ratios):.0%} of RTN's")  # fmt: skip


# ---------------------------------------------------------------- Exercise 3: the STE


def fake_quant_ste_reference(weight: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
    """The lab's fallback for Exercise 3: llmlab.quant.qat.StraightThrough, called as the
    exercise's function is."""
    return StraightThrough.apply(weight, bits, group_size)


def _ste_cases() -> list[tuple[str, torch.Tensor, int, int, torch.Tensor]]:
    """Random weights at 4 and 2 bits, each with a random incoming gradient."""
    generator = torch.Generator().manual_seed(77)
    cases = []
    for rows, cols, bits, group_size in ((16, 32, 4, 8), (8, 64, 2, 16)):
        weight = torch.randn(rows, cols, generator=generator) * 0.05
        incoming = torch.randn(rows, cols, generator=generator)
        cases.append((f"random weight {rows}x{cols}", weight, bits, group_size, incoming))
    return cases


def _ste_value_mistakes(weight, bits, group_size) -> list[tuple[torch.Tensor, str]]:
    return [
        (weight,
         "your output holds the float weight's own values: the forward pass must compute with "
         "the fake-quantized weight; only the backward pass treats rounding as the identity. "
         "If you used a detach trick: which term should give the values, and which one the "
         "gradient?"),
        (fake_quantize(weight, bits, symmetric=True, granularity=group_size),
         "your grid is symmetric around 0: QAT here trains for the asymmetric grid that RTN "
         "and GPTQ store (symmetric=False)."),
        (fake_quantize(weight, bits, symmetric=False),
         "your values sit on one grid per row (fake_quantize's default granularity, "
         "\"channel\"): the grid is fit on each group of group_size input columns."),
    ]  # fmt: skip


def _ste_gradient_mistake(got, incoming, weight, group_size) -> str:
    """What is wrong with the gradient `got` that reached the weight. Compared where the weight
    is neither its group's smallest nor its largest value: there the grid's range (min, max)
    adds a gradient of its own to a fake quantization differentiated as it is."""
    rows, cols = weight.shape
    groups = weight.reshape(rows, -1, group_size)
    inner = ((groups > groups.amin(-1, keepdim=True)) & (groups < groups.amax(-1, keepdim=True)))
    inner = inner.reshape(rows, cols)

    def inside_is(factor: float) -> bool:
        return torch.allclose(got[inner], factor * incoming[inner], rtol=1e-4, atol=1e-6)

    if inside_is(1.0):
        return ("the gradient is right except at each group's smallest and largest weight: "
                "there some of it also flows through your grid's range (its min and max). In "
                "the STE the whole fake quantization is the identity going back: which term "
                "should the graph see?")  # fmt: skip
    if inside_is(0.0):
        return ("the gradient that reaches weight is zero (at least wherever the weight is not "
                "its group's smallest or largest value): the graph went through the rounding, "
                "or its straight-through terms cancel out. What does round's derivative look "
                "like, and which term should the graph see?")  # fmt: skip
    if inside_is(-1.0):
        return ("the gradient that reaches weight is the incoming one with its sign flipped: "
                "the graph sees -weight (a detach on the wrong term?). Which term should the "
                "graph see, and with which sign?")  # fmt: skip
    if inside_is(2.0):
        return ("the gradient that reaches weight is twice the incoming one: the graph sees "
                "weight twice (a detach on the wrong term, or a straight-through round inside "
                "another straight-through term?). Which term should the graph see, once?")
    largest = float((got - incoming).abs().max())
    return (f"the gradient that reaches weight differs from the incoming one by up to "
            f"{largest:.3g}: going back, the STE passes the incoming gradient to weight "
            "unchanged. Which term should the graph see?")  # fmt: skip


@exercise(
    fallback=fake_quant_ste_reference,
    fallback_name="llmlab.course.checks.lab07.fake_quant_ste_reference",
)
def exercise_straight_through(fake_quant_ste) -> None:
    """Exercise 3: fake_quant_ste(weight, bits, group_size) -> the weight fake-quantized
    (llmlab.quant.fake_quantize, asymmetric, one grid per group of input columns) going forward,
    with the gradient passed straight through to weight going back."""
    name = "Exercise 3 (the straight-through estimator)"
    for what, weight, bits, group_size, incoming in _ste_cases():
        call_text = f"fake_quant_ste(<{what}>, bits={bits}, group_size={group_size})"
        leaf = weight.clone().requires_grad_()
        got = call(name, fake_quant_ste, leaf, bits, group_size)
        if not isinstance(got, torch.Tensor) or got.shape != weight.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise ExerciseFailed(f"{name}: {call_text} returned {shape}; return a tensor of the "
                                 f"weight's shape {tuple(weight.shape)}.")  # fmt: skip
        if not torch.equal(leaf.detach(), weight):
            raise ExerciseFailed(f"{name}: {call_text} changed weight itself: QAT keeps the "
                                 "float weights (the parameters training updates) and only "
                                 "computes with a rounded copy. Return a new tensor.")  # fmt: skip
        steps = rtn(weight, bits, group_size).scales.double().repeat_interleave(group_size, 1)
        values = got.detach().double().cpu()

        def same(wrong: torch.Tensor, values=values, steps=steps) -> bool:
            return bool(((wrong - values).abs() <= 1e-3 * steps).all())  # a thousandth of a step

        if not same(fake_quantize(weight, bits, symmetric=False, granularity=group_size).double()):
            hint = next((text for wrong, text in _ste_value_mistakes(weight, bits, group_size)
                         if same(wrong.double())), None)  # fmt: skip
            raise ExerciseFailed(f"{name}: {call_text}: " + (hint or (
                "your values are not llmlab.quant.fake_quantize(weight, bits, symmetric=False, "
                "granularity=group_size): compare the two on a small weight.")))  # fmt: skip
        if not got.requires_grad:
            raise ExerciseFailed(f"{name}: {call_text}: your output carries no graph, so no "
                                 "gradient reaches weight (weight.grad stays None). Was it made "
                                 "under torch.no_grad, from weight.detach(), or by "
                                 "llmlab.quant.fake_quantize alone (which works on a detached "
                                 "copy)?")  # fmt: skip
        (gradient,) = torch.autograd.grad(got, leaf, incoming.to(got.dtype), allow_unused=True)
        if gradient is None:
            raise ExerciseFailed(f"{name}: {call_text}: your output's graph does not reach "
                                 "weight: it starts from another tensor (a detached copy made "
                                 "to require grad?). Build it from weight itself.")  # fmt: skip
        gradient = gradient.detach().float().cpu()
        if not torch.allclose(gradient, incoming, rtol=1e-5, atol=1e-6):
            hint = _ste_gradient_mistake(gradient, incoming, weight, group_size)
            raise ExerciseFailed(f"{name}: {call_text}, backward with a random gradient g: "
                                 f"{hint}")  # fmt: skip
    passed(name, "fake_quantize's values at 4 and 2 bits going forward; the incoming gradient "
                 "reaches weight unchanged going back")  # fmt: skip


# ---------------------------------------------------------------- Prediction: bits per weight


def prediction_bits_per_weight(predicted) -> float:
    """Show the learner's guess of int4's bits per weight, groups of 128 input columns with an
    fp16 scale and a 4-bit zero point each, next to llmlab.quant.bits_per_weight's count."""
    measured = bits_per_weight(rtn(torch.randn(64, 1024), bits=4, group_size=128))
    compare_prediction("int4, groups of 128, fp16 scales, 4-bit zero points", predicted,
                       measured, "bits per weight")  # fmt: skip
    return measured


NOTEBOOK = "07_quantization.ipynb"
# The function each exercise asks for -> its check (tests/test_checks.py runs them all).
EXERCISES = {
    "rtn_groups": exercise_rtn_groups,
    "gptq_columns": exercise_gptq_columns,
    "fake_quant_ste": exercise_straight_through,
}
