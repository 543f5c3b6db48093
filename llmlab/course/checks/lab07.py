"""Checks for Lab 07 (4-bit quantization), and the versions the lab falls back to.

Exercise 1 (RTN) is checked against llmlab.quant.rtn, exercise 2 (a whole GPTQ layer: the
Hessian, damping, the inverse's Cholesky factor, the column loop in lazy blocks) against
llmlab.quant's hessian and GPTQ. Both compare dequantized weights (codes, scales and zeros may
come in any dtype), and when they differ the check recomputes each likely mistake and names the
one the answer matches. Exercise 3 (int4 codes packed two per byte, dequantized inside a
Linear's forward) compares the bytes with llmlab.quant.pack.pack_codes and the outputs with the
dequantized weight's. Exercise 4 (the straight-through estimator) compares the forward values
with llmlab.quant.fake_quantize and the gradient that reaches the weight with the incoming one;
a wrong gradient is named by how it relates to the incoming one (zero, flipped, doubled).
"""

from collections.abc import Callable

import torch
from torch import nn

from llmlab.course.checks import ExerciseFailed, call, compare_prediction, exercise, passed
from llmlab.quant import (
    bits_per_weight,
    fake_quantize,
    fit_grid,
    hessian,
    inverse_hessian_factor,
    rtn,
    to_codes,
)
from llmlab.quant.pack import pack_codes, unpack_codes
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
    ]


def _rtn_cases() -> list[tuple[str, torch.Tensor, int, int]]:
    """Random weights; the first two with special groups planted in them."""
    generator = torch.Generator().manual_seed(7)
    cases = []
    for rows, cols, bits, group_size, special in ((16, 32, 4, 8, True), (24, 48, 3, 12, True),
                                                  (32, 64, 4, 16, False)):
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
                             "return tensors.") from None


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
                "all 0) has a range of 0. What scale can such a group use?")
    if codes.min() < 0 or codes.max() > high:
        return (f"your codes run from {codes.min().item():g} to {codes.max().item():g}; "
                f"{bits} bits hold the {high + 1} codes 0 to {high}.")
    if not bool((codes == codes.round()).all()):
        return "your codes are not integers: round them."
    if not bool((zeros == zeros.round()).all()):
        return ("your zero points are not integers: a zero point is stored as a code, and "
                "only an integer one puts 0.0 exactly on the grid.")
    if zeros.min() < 0 or zeros.max() > high:
        return (f"your zero points run from {zeros.min().item():g} to {zeros.max().item():g}, "
                f"outside the codes' range [0, {high}]: clamp them.")
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
                                 "the three tensors (codes, scales, zeros).")
        codes, scales, zeros = (_as_tensor(name, call_text, part, value) for part, value
                                in zip(("codes", "scales", "zeros"), got, strict=True))
        if tuple(codes.shape) != (rows, cols):
            raise ExerciseFailed(f"{name}: {call_text} returned codes of shape "
                                 f"{tuple(codes.shape)}, expected the weight's "
                                 f"({rows}, {cols}): one code per weight.")
        codes = codes.double()
        if rows % group_size == 0 and torch.equal(
            codes, rtn(weight.T.contiguous(), bits, group_size).codes.T.double()
        ):
            raise ExerciseFailed(f"{name}: {call_text}: your groups run down the output rows: "
                                 "a group is group_size consecutive input columns of one row, "
                                 "the values one dot product sums over.")
        groups = cols // group_size
        scales = _per_group(name, call_text, "scales", scales, rows, groups)
        # Scales stored in fewer bits (fp16, as files store them) are off by up to half their
        # precision, which the codes multiply: allow that much, at least a thousandth of a step.
        precision = torch.finfo(scales.dtype).eps if scales.dtype.is_floating_point else 0.0
        tolerance = max(1e-3, 2**bits * precision)
        scales = scales.double()
        zeros = _per_group(name, call_text, "zeros", zeros, rows, groups).double()
        reference = rtn(weight, bits, group_size)
        steps = reference.scales.double().repeat_interleave(group_size, 1)
        mine = _dequantized(codes, scales, zeros, group_size)

        def same(a: torch.Tensor, b: torch.Tensor, steps=steps, tolerance=tolerance) -> bool:
            return bool(((a - b).abs() <= tolerance * steps).all())

        malformed = _rtn_malformed(codes, scales, zeros, bits)
        if malformed is None and same(mine, reference.dequantize().double()):
            continue
        hint = next((text for wrong, text in _rtn_mistakes(weight, bits, group_size)
                     if same(mine, wrong)), malformed)
        hint = hint or ("compare yours with llmlab.quant.rtn on a small weight: which group "
                        "differs first, and is it its scale, its zero point or its codes?")
        raise ExerciseFailed(f"{name}: {call_text}: {hint}")
    passed(name, "the same dequantized weights as llmlab.quant.rtn at 3 and 4 bits, outliers, "
                 "one-signed, constant and all-zero groups included")


# ---------------------------------------------------------------- Exercise 2: a GPTQ layer


def column_quantizer(weight: torch.Tensor, bits: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """quantize_column(column) -> that column rounded to its rows' grids, dequantized. One
    asymmetric grid per row, fit on the unchanged weight: GPTQ with one group per row fits it
    before any column is updated (llmlab.quant.gptq with group_size = in_features)."""
    scale, zero = fit_grid(weight.detach().float(), bits, symmetric=False)

    def quantize_column(column: torch.Tensor) -> torch.Tensor:
        return (to_codes(column, scale, zero, bits, symmetric=False) - zero) * scale

    return quantize_column


def _feedback_factor(h, damp, factor="inverse") -> torch.Tensor:
    """The matrix whose rows weigh the error feedback: U of the damped H^-1, or a mistake."""
    n = h.shape[0]
    damped = h + damp * h.diagonal().mean() * torch.eye(n)
    if factor == "inverse":
        return inverse_hessian_factor(h, damp)
    if factor == "absolute damping":  # damp added as it is, not as a share of H's diagonal
        return torch.linalg.cholesky(torch.linalg.inv(h + damp * torch.eye(n)), upper=True)
    if factor == "undamped":
        return torch.linalg.cholesky(torch.linalg.inv(h), upper=True)
    if factor == "hessian factor":
        return torch.linalg.cholesky(damped, upper=True)
    return torch.linalg.inv(damped)  # "inverse itself"


def _gptq_layer(weight, h, quantize_column, block_size, damp, *, factor="inverse", divide=True,
                sign=1.0, lazy=True, every_later=False) -> torch.Tensor:
    """GPTQ's layer (Algorithm 1, lazy blocks, one grid per row); the switches make mistakes."""
    u = _feedback_factor(h, damp, factor)
    w = weight.detach().float().clone()
    q = torch.zeros_like(w)
    cols = w.shape[1]
    for start in range(0, cols, block_size):
        end = min(start + block_size, cols)
        errors = w.new_zeros(w.shape[0], end - start)
        for i in range(start, end):
            q[:, i] = quantize_column(w[:, i])
            errors[:, i - start] = (w[:, i] - q[:, i]) / (u[i, i] if divide else 1)
            reach = cols if every_later else end  # every_later: the later blocks now, and again
            w[:, i + 1 : reach] -= sign * errors[:, i - start, None] * u[i, i + 1 : reach]
        if lazy:  # the later blocks, once per block
            w[:, end:] -= sign * errors @ u[start:end, end:]
    return q


def gptq_layer_reference(weight: torch.Tensor, inputs, quantize_column, block_size: int = 128,
                         damp: float = 0.01):
    """The lab's fallback for Exercise 2: (dequantized weight, H) with llmlab.quant's hessian
    and inverse_hessian_factor."""
    h = hessian(inputs)
    return _gptq_layer(weight, h, quantize_column, block_size, damp), h


def _gptq_cases() -> list[tuple[str, torch.Tensor, list[torch.Tensor], int, int, float]]:
    """Random layers whose inputs are strongly correlated (a few directions plus a little
    noise): there GPTQ's compensation pays, and its result differs clearly from RTN's. Inputs
    come batched (3-D) and as several tensors of different lengths, blocks do not always divide
    the columns, and one layer has fewer calibration tokens than input features (H singular)."""
    generator = torch.Generator().manual_seed(70)

    def inputs(tokens, cols, rank):
        mixing = torch.randn(rank, cols, generator=generator)
        x = torch.randn(tokens, rank, generator=generator) @ mixing
        return x + 0.1 * torch.randn(tokens, cols, generator=generator)

    cases = []
    for rows, cols, rank, lengths, bits, block, damp in (
        (12, 32, 6, (64, 64), 4, 8, 0.01),
        (16, 24, 4, (200,), 3, 10, 0.01),
        (8, 48, 12, (20,), 4, 16, 0.01),
        (6, 16, 5, (30, 90, 20), 4, 64, 0.05),
    ):
        x = [inputs(n, cols, rank) for n in lengths]
        if len(lengths) == 2:
            x = [part.reshape(2, -1, cols) for part in x]  # (batch, seq, in), as a layer sees it
        weight = torch.randn(rows, cols, generator=generator) * 0.1
        what = (f"{rows}x{cols} layer, {sum(lengths)} calibration tokens in "
                f"{len(x)} tensor{'s' * (len(x) > 1)} of shape "
                f"{', '.join(str(tuple(part.shape)) for part in x)}, {bits} bits")
        cases.append((what, weight, x, bits, block, damp))
    return cases


def _gptq_mistakes(weight, h, quantize_column, block, damp) -> list[tuple[torch.Tensor, str]]:
    mistakes = [
        (dict(sign=0.0),
         "your result is round-to-nearest's: no rounding error reached the columns not yet "
         "quantized. Is there an update at all? If there is: U is upper triangular, so which "
         "of its row i and its column i has entries after i?"),
        (dict(divide=False),
         "the error is not divided by U[i, i]: how does the Optimal Brain Surgeon update scale "
         "a column's error by that column's entry of the inverse Hessian?"),
        (dict(sign=-1.0),
         "the update has the wrong sign: it doubles the rounding error instead of making up "
         "for it. Which way should the later columns move?"),
        (dict(lazy=False),
         "the columns after each block never got that block's errors: the lazy update of the "
         "later blocks, once per block, is missing."),
        (dict(every_later=True),
         "the later blocks got each error twice: once column by column and once in the lazy "
         "update at the block's end. Which columns does each of the two reach?"),
        (dict(factor="hessian factor"),
         "you used the Cholesky factor of H, not of its inverse: which matrix says how a "
         "column's error is best shared out?"),
        (dict(factor="inverse itself"),
         "you used H^-1 itself: its row i is right for column i only while no column before "
         "it was quantized. Which factor of H^-1 holds the updated rows of every step at once?"),
        (dict(factor="absolute damping"),
         "your damping adds `damp` to H's diagonal as it is: the damping is a share of H's "
         "mean diagonal, so that it means the same whatever the inputs' scale."),
        (dict(factor="undamped"),
         "H was inverted without damping: what does damping add to H, and when does it "
         "matter?"),
    ]
    if damp != 0.01:  # before the others: a fixed 0.01 may come close to another mistake
        mistakes.insert(0, ({"damp": 0.01}, f"your damping is 0.01 where damp={damp} was "
                                            "asked."))
    results = []
    for switches, text in mistakes:
        options = {"block": block, "damp": damp, **switches}
        block_size, damp_used = options.pop("block"), options.pop("damp")
        try:
            results.append((_gptq_layer(weight, h, quantize_column, block_size, damp_used,
                                        **options), text))
        except torch.linalg.LinAlgError:  # no damping on a singular H: it fails as theirs did
            continue
    return results


def _rounded(weight, quantize_column) -> torch.Tensor:
    """Every column rounded on its own, nothing fed back: round-to-nearest."""
    return torch.stack([quantize_column(weight[:, i]) for i in range(weight.shape[1])], 1)


def _output_error(weight, q, x) -> float:
    return float(torch.linalg.matrix_norm((weight - q) @ x.T))


def _hessian_mistake(got, h, x, damp) -> str:
    """What is wrong with the Hessian the answer returned (its shape is right)."""
    n = x.shape[0]
    candidates = [
        (h * n / 2, "is X^T X: the Hessian of the mean squared error is 2 X^T X / n."),
        (h * n, "is summed over the tokens, not averaged: divide by their number n."),
        (h / 2, "misses the factor 2 of the squared error's derivative."),
        (h + damp * h.diagonal().mean() * torch.eye(h.shape[0]),
         "has the damping in it: return H as the inputs give it, damp a copy."),
    ]
    return next((f"your H {text}" for wrong, text in candidates
                 if torch.allclose(got, wrong, rtol=1e-4, atol=1e-6 * float(wrong.abs().max()))),
                "your H is not 2 X^T X / n over all n calibration tokens (every input tensor "
                "flattened to (tokens, in) first).")


def _close_enough(got, expected, weight, x) -> bool:
    """The same weights; or, where float rounding in another order tipped a few weights to the
    neighbouring grid point, at most 1% of them different and the same output error."""
    if torch.allclose(got, expected, rtol=0, atol=1e-5):
        return True
    differ = float(((got - expected).abs() > 1e-5).float().mean())
    ours, theirs = _output_error(weight, got, x), _output_error(weight, expected, x)
    return differ <= 0.01 and abs(ours - theirs) <= 0.01 * theirs


def _call_gptq_layer(name, call_text, gptq_layer, weight, x_parts, quantize_column, block, damp):
    """The answer called; a failure inside it turned into a message that names likely causes."""
    tokens = sum(part.reshape(-1, part.shape[-1]).shape[0] for part in x_parts)
    try:
        return call(name, gptq_layer, weight.clone(), [part.clone() for part in x_parts],
                    quantize_column, block_size=block, damp=damp)
    except torch.linalg.LinAlgError as error:
        raise ExerciseFailed(
            f"{name}: {call_text} raised {type(error).__name__}: {str(error).splitlines()[0]} "
            f"With {tokens} tokens for {weight.shape[1]} input features H is singular: what does "
            "damping add to it, and to which matrix?") from None
    except (RuntimeError, IndexError) as error:
        raise ExerciseFailed(
            f"{name}: {call_text} raised {type(error).__name__}: {str(error).splitlines()[0]} "
            "Keep the shapes in view: a calibration input is (..., in), H and U are "
            "(in, in), the weight is (out, in).") from None


@exercise(
    fallback=gptq_layer_reference,
    fallback_name="llmlab.course.checks.lab07.gptq_layer_reference",
)
def exercise_gptq_layer(gptq_layer) -> None:
    """Exercise 2: gptq_layer(weight, inputs, quantize_column, block_size, damp) -> (the
    dequantized weight GPTQ chooses, the Hessian H = 2 X^T X / n of the calibration inputs)."""
    name = "Exercise 2 (a GPTQ layer)"
    ratios = []
    for what, weight, x_parts, bits, block, damp in _gptq_cases():
        rows, cols = weight.shape
        x = torch.cat([part.reshape(-1, cols) for part in x_parts])
        grid = column_quantizer(weight, bits)

        def quantize_column(column, rows=rows, grid=grid):
            if tuple(getattr(column, "shape", ())) != (rows,):
                raise ExerciseFailed(f"{name}: quantize_column was given shape "
                                     f"{tuple(getattr(column, 'shape', ()))}: give it one column "
                                     f"of the weight, w[:, i], shape ({rows},).")
            return grid(column)

        call_text = f"gptq_layer(<{what}>, quantize_column, block_size={block}, damp={damp})"
        got = _call_gptq_layer(name, call_text, gptq_layer, weight, x_parts, quantize_column,
                               block, damp)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise ExerciseFailed(f"{name}: {call_text} returned a {type(got).__name__}; return "
                                 "two tensors: (the dequantized weight, H).")
        q, h_got = (_as_tensor(name, call_text, part, value).float() for part, value
                    in zip(("the weight", "H"), got, strict=True))
        h = hessian(x_parts)
        if tuple(h_got.shape) != (cols, cols):
            raise ExerciseFailed(f"{name}: {call_text} returned H of shape {tuple(h_got.shape)}, "
                                 f"expected ({cols}, {cols}): one row and column per input "
                                 "feature. Which product of X with itself is that, with X of "
                                 "shape (tokens, in)?")
        if not torch.allclose(h_got, h, rtol=1e-4, atol=1e-6 * float(h.abs().max())):
            raise ExerciseFailed(f"{name}: {call_text}: {_hessian_mistake(h_got, h, x, damp)}")
        if tuple(q.shape) != (rows, cols):
            raise ExerciseFailed(f"{name}: {call_text} returned a weight of shape "
                                 f"{tuple(q.shape)}; return the dequantized weight, shape "
                                 f"({rows}, {cols}).")
        expected = _gptq_layer(weight, h, grid, block, damp)
        rtn_error = _output_error(weight, _rounded(weight, grid), x)
        if _close_enough(q, expected, weight, x):
            ratios.append(_output_error(weight, q, x) / rtn_error)
            continue
        hint = next((text for wrong, text in _gptq_mistakes(weight, h, grid, block, damp)
                     if _close_enough(q, wrong, weight, x)), None)
        if hint is None:
            off_grid = not torch.allclose(q, _rounded(q, grid), rtol=0, atol=1e-5)
            hint = ("your result is not on the quantization grid: return the quantized "
                    "columns (what quantize_column gave), not the updated weights."
                    if off_grid else
                    "your result is on the grid but not GPTQ's: run yours and "
                    "llmlab.quant.gptq (group_size = in_features) side by side on a small "
                    "layer; which column differs first?")
        error = _output_error(weight, q, x)
        raise ExerciseFailed(f"{name}: {call_text}: output error ||(W - Q) X|| is {error:.4g}, "
                             f"RTN's is {rtn_error:.4g}. {hint}")
    passed(name, "the same H and weights as llmlab.quant's GPTQ on 4 layers at 3 and 4 bits, "
                 "lazy blocks that do not divide the columns and a singular H included; output "
                 f"error {min(ratios):.0%} to {max(ratios):.0%} of RTN's")


# ---------------------------------------------------------------- Exercise 3: packed int4


class PackedInt4LinearReference(nn.Module):
    """The lab's fallback for Exercise 3: codes packed by llmlab.quant.pack.pack_codes,
    unpacked and dequantized inside forward."""

    def __init__(self, codes, scales, zeros, group_size: int):
        super().__init__()
        self.register_buffer("packed", pack_codes(torch.as_tensor(codes), 4))
        self.register_buffer("scales", torch.as_tensor(scales).float())
        self.register_buffer("zeros", torch.as_tensor(zeros).float())
        self.group_size = group_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        codes = unpack_codes(self.packed, 4, 2 * self.packed.shape[1])
        weight = _dequantized(codes, self.scales, self.zeros, self.group_size)
        return x @ weight.T.to(x.dtype)


def _packed_cases():
    """Random codes (0, 8 and 15 among them: a high nibble of 8 or more sets a byte's top bit),
    scales in fp32 and fp16, zero points as integers and as floats, 2-D and 3-D inputs."""
    generator = torch.Generator().manual_seed(73)
    cases = []
    for rows, cols, group_size, scale_dtype, x_shape in (
        (6, 32, 8, torch.float32, (5, 32)),
        (10, 64, 32, torch.float16, (2, 3, 64)),
        (3, 16, 16, torch.float32, (1, 16)),
    ):
        codes = torch.randint(0, 16, (rows, cols), generator=generator, dtype=torch.uint8)
        codes[0, :4] = torch.tensor([0, 15, 8, 7], dtype=torch.uint8)
        groups = cols // group_size
        scales = (0.01 + 0.05 * torch.rand(rows, groups, generator=generator)).to(scale_dtype)
        zeros = torch.randint(0, 16, (rows, groups), generator=generator)
        if scale_dtype == torch.float16:
            zeros = zeros.float()
        x = torch.randn(*x_shape, generator=generator)
        cases.append((f"{rows}x{cols} codes, groups of {group_size}, {scale_dtype} scales",
                      codes, scales, zeros, group_size, x))
    return cases


def _swap_pairs(codes: torch.Tensor) -> torch.Tensor:
    """Columns 2j and 2j + 1 swapped: the codes as a swapped nibble order reads them."""
    return codes.reshape(codes.shape[0], -1, 2).flip(-1).reshape(codes.shape)


def _packed_mistake(packed, codes) -> str:
    """What is wrong with the bytes the answer packed (their shape and dtype are right)."""
    half = codes.shape[1] // 2
    halves = (codes[:, :half] | (codes[:, half:] << 4)).to(torch.uint8)
    if torch.equal(packed, pack_codes(_swap_pairs(codes), 4)):
        return ("your nibbles are swapped: the code of column 2j goes in the low 4 bits of "
                "byte j, as GPTQ checkpoints and llmlab.quant.pack.pack_codes store it.")
    if torch.equal(packed, halves):
        return ("your byte j holds columns j and j + in/2: a packed byte holds two neighbouring "
                "codes, columns 2j and 2j + 1.")
    return ("your bytes are not the codes two per byte (column 2j in the low 4 bits, 2j + 1 in "
            "the high 4): compare with llmlab.quant.pack.pack_codes on a small example.")


def _forward_mistakes(codes, scales, zeros, group_size, x) -> list[tuple[torch.Tensor, str]]:
    signed = codes.double() - 16 * (codes >= 8).double() * (torch.arange(codes.shape[1]) % 2)
    scale_rows = scales.double().repeat(1, group_size)
    zero_rows = zeros.double().repeat(1, group_size)
    steps = scales.double().repeat_interleave(group_size, 1)
    zero_points = zeros.double().repeat_interleave(group_size, 1)
    weights = [
        (_dequantized(_swap_pairs(codes), scales, zeros, group_size),
         "your forward reads the nibbles the other way round from how you packed them: which "
         "column's code sits in the low 4 bits?"),
        (_dequantized(signed, scales, zeros, group_size),
         "the codes from the high nibbles come out 16 too low where they are 8 or more: a "
         "signed byte (int8) is shifted with its sign bit. Read the bytes as unsigned."),
        ((codes.double() - zero_rows) * scale_rows,
         "your scales and zero points go to the wrong columns: groups are consecutive columns, "
         "so each group's scale repeats group_size times in a row (repeat_interleave, not "
         "repeat)."),
        (codes.double() * steps,
         "your zero points are not subtracted: the weight is (code - zero) * scale."),
        (codes.double() * steps - zero_points,
         "the zero point is subtracted after scaling: it is a code, so it comes off the code."),
    ]
    return [(x.double() @ weight.T, text) for weight, text in weights]


_MODULE_INTERNALS = frozenset(vars(nn.Module()))


def _held_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor the module and its submodules hold: parameters, buffers, plain attributes,
    and tensors inside an attribute's dict, list or tuple (a cache)."""
    tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    for prefix, part in module.named_modules():
        for key, value in vars(part).items():
            if key in _MODULE_INTERNALS:  # _buffers, _parameters: already named above
                continue
            name = f"{prefix}.{key}" if prefix else key
            entries = (value.items() if isinstance(value, dict) else
                       enumerate(value) if isinstance(value, list | tuple) else ())
            tensors.update({f"{name}[{inner!r}]": item for inner, item in entries
                            if isinstance(item, torch.Tensor)})
            if isinstance(value, torch.Tensor):
                tensors[name] = value
    return tensors


def _unpacked_copies(module: nn.Module, count: int) -> list[str]:
    """Names of the tensors the module holds with `count` (a code per weight) elements or more."""
    return [key for key, value in _held_tensors(module).items() if value.numel() >= count]


def _refuse_unpacked_copies(name: str, call_text: str, module: nn.Module, codes, when: str):
    copies = _unpacked_copies(module, codes.numel())
    if copies:
        raise ExerciseFailed(f"{name}: {call_text} keeps {', '.join(copies)} {when}, a tensor "
                             "with a value per weight: the point of packing is the bytes it "
                             "saves. Unpack inside every forward and let the unpacked weight "
                             "go; keep only `packed`, the scales and the zero points.")


@exercise(
    fallback=PackedInt4LinearReference,
    fallback_name="llmlab.course.checks.lab07.PackedInt4LinearReference",
)
def exercise_packed_int4(packed_linear) -> None:
    """Exercise 3: PackedInt4Linear(codes, scales, zeros, group_size) keeps the 4-bit codes
    two per byte in `packed` (uint8, (out, in / 2), column 2j in the low nibble of byte j) and
    computes x @ W^T with W = (codes - zeros) * scales unpacked inside forward."""
    name = "Exercise 3 (a packed int4 Linear)"
    for what, codes, scales, zeros, group_size, x in _packed_cases():
        rows, cols = codes.shape
        call_text = f"PackedInt4Linear(<{what}>, group_size={group_size})"
        module = call(name, packed_linear, codes.clone(), scales.clone(), zeros.clone(),
                      group_size)
        packed = getattr(module, "packed", None)
        if not isinstance(packed, torch.Tensor):
            raise ExerciseFailed(f"{name}: {call_text} has no tensor `packed`: keep the packed "
                                 "codes as self.packed (a buffer, so .to(device) moves it).")
        if packed.dtype != torch.uint8:
            raise ExerciseFailed(f"{name}: {call_text}: `packed` is {packed.dtype}; store bytes, "
                                 "torch.uint8 (unsigned: a signed byte reads a high nibble of 8 "
                                 "or more as negative).")
        if tuple(packed.shape) != (rows, cols // 2):
            raise ExerciseFailed(f"{name}: {call_text}: `packed` has shape {tuple(packed.shape)}, "
                                 f"expected ({rows}, {cols // 2}): two 4-bit codes per byte, "
                                 "along each row.")
        if not torch.equal(packed.cpu(), pack_codes(codes, 4)):
            raise ExerciseFailed(f"{name}: {call_text}: {_packed_mistake(packed.cpu(), codes)}")
        _refuse_unpacked_copies(name, call_text, module, codes, "besides them")
        try:
            y = call(name, module, x.clone())
        except RuntimeError as error:
            raise ExerciseFailed(f"{name}: {call_text} on x of shape {tuple(x.shape)} raised "
                                 f"RuntimeError: {str(error).splitlines()[0]} The output is "
                                 f"x @ W^T, shape (..., {rows}).") from None
        # A weight dequantized on the first call and kept would undo the saving from then on.
        _refuse_unpacked_copies(name, call_text, module, codes, "after forward")
        y = _as_tensor(name, call_text, "forward's output", y).double()
        expected = x.double() @ _dequantized(codes, scales, zeros, group_size).T
        if tuple(y.shape) != tuple(expected.shape):
            raise ExerciseFailed(f"{name}: {call_text} on x of shape {tuple(x.shape)} returned "
                                 f"shape {tuple(y.shape)}, expected {tuple(expected.shape)}: "
                                 "x @ W^T, one output per row of W.")

        tolerance = 1e-4 * float(expected.abs().max())

        def same(a, b, tolerance=tolerance) -> bool:
            return bool(((a - b).abs() <= tolerance).all())

        if not same(y, expected):
            hint = next((text for wrong, text in _forward_mistakes(codes, scales, zeros,
                                                                   group_size, x)
                         if same(y, wrong)), "compare your dequantized weight with "
                        "(codes - zeros) * scales, each group's scale and zero point over its "
                        "group_size columns.")
            raise ExerciseFailed(f"{name}: {call_text}, forward on x of shape "
                                 f"{tuple(x.shape)}: {hint}")
    passed(name, "the bytes of llmlab.quant.pack.pack_codes (half a byte per weight) and the "
                 "dequantized weight's outputs, fp16 scales and 3-D inputs included")


# ---------------------------------------------------------------- Exercise 4: the STE


def fake_quant_ste_reference(weight: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
    """The lab's fallback for Exercise 4: llmlab.quant.qat.StraightThrough, called as the
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
    ]


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
                "should the graph see?")
    if inside_is(0.0):
        return ("the gradient that reaches weight is zero (at least wherever the weight is not "
                "its group's smallest or largest value): the graph went through the rounding, "
                "or its straight-through terms cancel out. What does round's derivative look "
                "like, and which term should the graph see?")
    if inside_is(-1.0):
        return ("the gradient that reaches weight is the incoming one with its sign flipped: "
                "the graph sees -weight (a detach on the wrong term?). Which term should the "
                "graph see, and with which sign?")
    if inside_is(2.0):
        return ("the gradient that reaches weight is twice the incoming one: the graph sees "
                "weight twice (a detach on the wrong term, or a straight-through round inside "
                "another straight-through term?). Which term should the graph see, once?")
    largest = float((got - incoming).abs().max())
    return (f"the gradient that reaches weight differs from the incoming one by up to "
            f"{largest:.3g}: going back, the STE passes the incoming gradient to weight "
            "unchanged. Which term should the graph see?")


@exercise(
    fallback=fake_quant_ste_reference,
    fallback_name="llmlab.course.checks.lab07.fake_quant_ste_reference",
)
def exercise_straight_through(fake_quant_ste) -> None:
    """Exercise 4: fake_quant_ste(weight, bits, group_size) -> the weight fake-quantized
    (llmlab.quant.fake_quantize, asymmetric, one grid per group of input columns) going forward,
    with the gradient passed straight through to weight going back."""
    name = "Exercise 4 (the straight-through estimator)"
    for what, weight, bits, group_size, incoming in _ste_cases():
        call_text = f"fake_quant_ste(<{what}>, bits={bits}, group_size={group_size})"
        leaf = weight.clone().requires_grad_()
        got = call(name, fake_quant_ste, leaf, bits, group_size)
        if not isinstance(got, torch.Tensor) or got.shape != weight.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise ExerciseFailed(f"{name}: {call_text} returned {shape}; return a tensor of the "
                                 f"weight's shape {tuple(weight.shape)}.")
        if not torch.equal(leaf.detach(), weight):
            raise ExerciseFailed(f"{name}: {call_text} changed weight itself: QAT keeps the "
                                 "float weights (the parameters training updates) and only "
                                 "computes with a rounded copy. Return a new tensor.")
        steps = rtn(weight, bits, group_size).scales.double().repeat_interleave(group_size, 1)
        values = got.detach().double().cpu()

        def same(wrong: torch.Tensor, values=values, steps=steps) -> bool:
            return bool(((wrong - values).abs() <= 1e-3 * steps).all())  # a thousandth of a step

        if not same(fake_quantize(weight, bits, symmetric=False, granularity=group_size).double()):
            hint = next((text for wrong, text in _ste_value_mistakes(weight, bits, group_size)
                         if same(wrong.double())), None)
            raise ExerciseFailed(f"{name}: {call_text}: " + (hint or (
                "your values are not llmlab.quant.fake_quantize(weight, bits, symmetric=False, "
                "granularity=group_size): compare the two on a small weight.")))
        if not got.requires_grad:
            raise ExerciseFailed(f"{name}: {call_text}: your output carries no graph, so no "
                                 "gradient reaches weight (weight.grad stays None). Was it made "
                                 "under torch.no_grad, from weight.detach(), or by "
                                 "llmlab.quant.fake_quantize alone (which works on a detached "
                                 "copy)?")
        (gradient,) = torch.autograd.grad(got, leaf, incoming.to(got.dtype), allow_unused=True)
        if gradient is None:
            raise ExerciseFailed(f"{name}: {call_text}: your output's graph does not reach "
                                 "weight: it starts from another tensor (a detached copy made "
                                 "to require grad?). Build it from weight itself.")
        gradient = gradient.detach().float().cpu()
        if not torch.allclose(gradient, incoming, rtol=1e-5, atol=1e-6):
            hint = _ste_gradient_mistake(gradient, incoming, weight, group_size)
            raise ExerciseFailed(f"{name}: {call_text}, backward with a random gradient g: "
                                 f"{hint}")
    passed(name, "fake_quantize's values at 4 and 2 bits going forward; the incoming gradient "
                 "reaches weight unchanged going back")


# ---------------------------------------------------------------- Prediction: bits per weight


def prediction_bits_per_weight(predicted) -> float:
    """Show the learner's guess of int4's bits per weight, groups of 128 input columns with an
    fp16 scale and a 4-bit zero point each, next to llmlab.quant.bits_per_weight's count."""
    measured = bits_per_weight(rtn(torch.randn(64, 1024), bits=4, group_size=128))
    compare_prediction("int4, groups of 128, fp16 scales, 4-bit zero points", predicted,
                       measured, "bits per weight")
    return measured


NOTEBOOK = "07_quantization.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "rtn_groups": exercise_rtn_groups,
    "gptq_layer": exercise_gptq_layer,
    "PackedInt4Linear": exercise_packed_int4,
    "fake_quant_ste": exercise_straight_through,
}
