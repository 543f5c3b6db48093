"""Lab 07's checks accept correct answers in their several forms and reject likely mistakes, each
with a message that names it. (tests/course/checks/test_every_lab.py proves they pass on the
solution notebook and say "not done yet" on the generated stub, once the notebook exists.)"""

import numpy as np
import pytest
import torch
from helpers.checks import fails, stub

from llmlab.course.checks import lab07 as check
from llmlab.quant import fake_quantize, gptq, hessian

# ---------------------------------------------------------------- Exercise 1: group-wise RTN


def rtn_groups(weight, bits, group_size, *, steps_extra=0, rounding=torch.round, widen=True,
               clamp_zero=True, round_zero=True, round_shifted=False, code_top=0,
               by_rows=False, guard_zero_range=True):
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
              "symmetric around 0")


def test_exercise_1_rejects_wrong_shapes_and_types():
    fails(check.exercise_rtn_groups, lambda w, b, g: rtn_groups(w, b, g)[0], "return the three")
    fails(check.exercise_rtn_groups, lambda w, b, g: (w.T, *rtn_groups(w, b, g)[1:]),
          "codes of shape")

    def scales_transposed(w, b, g):
        codes, scales, zeros = rtn_groups(w, b, g)
        return codes, scales.T, zeros.T

    fails(check.exercise_rtn_groups, scales_transposed, "one per row and per group")


def test_exercise_1_accepts_scales_stored_in_fewer_bits(capsys):
    """Groups store fp16 scales: an answer that returns them so (or in bf16) is right."""
    for dtype in (torch.float16, torch.bfloat16):
        def answer(w, b, g, dtype=dtype):
            codes, scales, zeros = rtn_groups(w, b, g)
            return codes, scales.to(dtype), zeros.to(dtype)

        assert check.exercise_rtn_groups(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == 2


def test_exercise_1_on_the_stub_returns_the_fallback(capsys):
    assert check.exercise_rtn_groups(stub) is check.rtn_groups_reference
    assert "not done yet" in capsys.readouterr().out


def test_exercise_1_cases_hold_the_groups_the_mistakes_need():
    """The all-positive and constant groups are where the clamp and the range to 0 show."""
    what, weight, bits, group_size = check._rtn_cases()[0]
    groups = weight.reshape(weight.shape[0], -1, group_size)
    assert bool((groups.amin(-1) > 0).any()) and bool((groups.amax(-1) < 0).any())
    assert bool((groups == 0).all(-1).any())


# ---------------------------------------------------------------- Exercise 2: a GPTQ layer


def gptq_layer(weight, inputs, quantize_column, block_size=128, damp=0.01, *, h_scale="mean",
               damping="relative", factor="inverse", divide=True, sign=1.0, use_column=False,
               lazy=True, every_later=False, return_updated=False):
    """A learner's GPTQ layer with one switch per likely mistake (all off: a correct one)."""
    parts = [part.reshape(-1, part.shape[-1]).double() for part in inputs]
    x, n = torch.cat(parts), sum(len(part) for part in parts)
    h = {"mean": 2 * x.T @ x / n, "sum": 2 * x.T @ x, "xtx": x.T @ x, "no two": x.T @ x / n,
         "per batch": sum(2 * p.T @ p / len(p) for p in parts) / len(parts),
         "transposed": 2 * x @ x.T / n}[h_scale]
    eye = torch.eye(h.shape[0], dtype=h.dtype)
    damped = h + damp * (h.diagonal().mean() if damping == "relative" else 1) * eye
    if damping == "none":
        damped = h
    u = {"inverse": lambda: torch.linalg.cholesky(torch.linalg.inv(damped), upper=True),
         "hessian factor": lambda: torch.linalg.cholesky(damped, upper=True),
         "inverse itself": lambda: torch.linalg.inv(damped)}[factor]().float()
    if use_column:
        u = u.T
    w = weight.clone()
    q = torch.zeros_like(w)
    cols = w.shape[1]
    for start in range(0, cols, block_size):
        end = min(start + block_size, cols)
        errors = torch.zeros(w.shape[0], end - start)
        for i in range(start, end):
            q[:, i] = quantize_column(w[:, i])
            errors[:, i - start] = (w[:, i] - q[:, i]) / (u[i, i] if divide else 1)
            reach = cols if every_later else end
            w[:, i + 1 : reach] -= sign * torch.outer(errors[:, i - start], u[i, i + 1 : reach])
        if lazy:
            w[:, end:] -= sign * errors @ u[start:end, end:]
    return (w if return_updated else q), h.float()


def gptq_layer_unblocked(weight, inputs, quantize_column, block_size=128, damp=0.01):
    """Another correct form: float32, llmlab's Cholesky route, every later column updated at
    once (lazy blocks give the same result), whole rows of u (zero left of the diagonal)."""
    x = torch.cat([part.reshape(-1, part.shape[-1]) for part in inputs])
    h = 2 * x.T @ x / len(x)
    damped = h + damp * h.diagonal().mean() * torch.eye(len(h))
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(damped)), upper=True)
    w, q = weight.clone(), []
    for i in range(w.shape[1]):
        q.append(quantize_column(w[:, i]))
        w -= torch.outer((w[:, i] - q[-1]) / u[i, i], u[i])
    return torch.stack(q, dim=1), h


def test_exercise_2_accepts_right_answers_in_their_forms(capsys):
    answers = (gptq_layer, gptq_layer_unblocked, check.gptq_layer_reference)
    for answer in answers:
        assert check.exercise_gptq_layer(answer) is answer
    out = capsys.readouterr().out
    assert out.count("PASSED") == len(answers) and "of RTN's" in out


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(h_scale="sum"), "summed over the tokens"),
        (dict(h_scale="xtx"), "your H is X\\^T X"),
        (dict(h_scale="no two"), "misses the factor 2"),
        (dict(h_scale="per batch"), "over all n calibration tokens"),
        (dict(h_scale="transposed"), "Keep the shapes in view"),
        (dict(damping="none"), "without damping"),
        (dict(damping="absolute"), "damping adds `damp` to H's diagonal as it is"),
        (dict(factor="hessian factor"), "Cholesky factor of H, not of its inverse"),
        (dict(factor="inverse itself"), r"H\^-1 itself"),
        (dict(use_column=True), "which of its row i and its column i"),
        (dict(divide=False), r"not divided by U\[i, i\]"),
        (dict(sign=0.0), "round-to-nearest's: no rounding error reached"),
        (dict(sign=-1.0), "wrong sign"),
        (dict(lazy=False), "never got that block's errors"),
        (dict(every_later=True), "got each error twice"),
        (dict(return_updated=True), "not on the quantization grid"),
    ],
)
def test_exercise_2_rejects_likely_mistakes(switch, match):
    fails(check.exercise_gptq_layer, lambda *args, **kw: gptq_layer(*args, **kw, **switch), match)


def test_exercise_2_names_a_fixed_damping_and_a_damped_h():
    fails(check.exercise_gptq_layer,
          lambda w, x, qc, block_size, damp: gptq_layer(w, x, qc, block_size, 0.01),
          "damping is 0.01 where damp=0.05 was asked")

    def damped_h(w, x, qc, block_size, damp):
        q, h = gptq_layer(w, x, qc, block_size, damp)
        return q, h + damp * h.diagonal().mean() * torch.eye(len(h))

    fails(check.exercise_gptq_layer, damped_h, "has the damping in it")


def test_exercise_2_says_what_quantize_column_takes_and_what_to_return():
    fails(check.exercise_gptq_layer, lambda w, x, qc, **kw: (qc(w), None), "give it one column")
    fails(check.exercise_gptq_layer, lambda *a, **kw: gptq_layer(*a, **kw)[0], "return two")
    fails(check.exercise_gptq_layer,
          lambda *a, **kw: (gptq_layer(*a, **kw)[0].T, gptq_layer(*a, **kw)[1]),
          "return the dequantized weight")


def test_exercise_2_on_the_stub_returns_the_fallback(capsys):
    assert check.exercise_gptq_layer(stub) is check.gptq_layer_reference
    assert "not done yet" in capsys.readouterr().out


def test_exercise_2_reference_is_llmlab_gptq_and_gptq_clearly_beats_rtn():
    """The check's loop gives llmlab.quant.gptq's weights (one grid per row) in any block size,
    and on every case GPTQ's output error is well below RTN's."""
    for _, weight, x_parts, bits, block, damp in check._gptq_cases():
        x = torch.cat([part.reshape(-1, weight.shape[1]) for part in x_parts])
        h = hessian(x_parts)
        grid = check.column_quantizer(weight, bits)
        expected = gptq(weight, h, bits, group_size=weight.shape[1], damp=damp).dequantize()
        for block_size in (block, 1, weight.shape[1]):
            q = check._gptq_layer(weight, h, grid, block_size, damp)
            assert torch.allclose(q, expected, atol=1e-5)
        rtn = check._rounded(weight, grid)
        assert check._output_error(weight, q, x) < 0.8 * check._output_error(weight, rtn, x)


def test_exercise_2_singular_case_needs_damping():
    _, weight, x_parts, *_ = check._gptq_cases()[2]
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.cholesky(hessian(x_parts).double())
    one_case = check._gptq_cases()[2:3]
    with pytest.MonkeyPatch.context() as patch:  # the singular layer alone: no damping fails it
        patch.setattr(check, "_gptq_cases", lambda: one_case)
        fails(check.exercise_gptq_layer,
              lambda *a, **kw: gptq_layer(*a, **kw, damping="none"), "H is singular")


# ---------------------------------------------------------------- Exercise 3: packed int4


class PackedLinear(torch.nn.Module):
    """A learner's packed Linear with one switch per likely mistake (all off: a correct one)."""

    def __init__(self, codes, scales, zeros, group_size, *, swap_pack=False, swap_unpack=False,
                 halves=False, dtype=torch.uint8, keep_codes=False, signed_read=False,
                 repeat=False, no_zero=False, zero_after=False, no_transpose=False,
                 cache=None):
        super().__init__()
        codes = codes.to(torch.uint8)
        low, high = codes[:, 0::2], codes[:, 1::2]
        if halves:
            low, high = codes[:, : codes.shape[1] // 2], codes[:, codes.shape[1] // 2 :]
        if swap_pack:
            low, high = high, low
        self.register_buffer("packed", (low | (high << 4)).to(dtype))
        if keep_codes:
            self.codes = codes
        self.scales, self.zeros, self.group_size = scales.float(), zeros.float(), group_size
        self.swap_unpack, self.signed_read, self.repeat = swap_unpack, signed_read, repeat
        self.no_zero, self.zero_after, self.no_transpose = no_zero, zero_after, no_transpose
        self.cache, self.saved = cache, {}

    def forward(self, x):
        if self.cache == "attribute" and hasattr(self, "weight"):
            return x @ self.weight.T
        packed = self.packed.to(torch.int8) if self.signed_read else self.packed
        low, high = packed & 0x0F, packed >> 4
        if self.swap_unpack:
            low, high = high, low
        codes = torch.stack((low, high), -1).flatten(-2).float()
        expand = (lambda t: t.repeat(1, self.group_size)) if self.repeat else (
            lambda t: t.repeat_interleave(self.group_size, 1))
        scale, zero = expand(self.scales), expand(self.zeros)
        if self.no_zero:
            weight = codes * scale
        elif self.zero_after:
            weight = codes * scale - zero
        else:
            weight = (codes - zero) * scale
        if self.cache == "attribute":  # the dequantized weight kept for the next call
            self.weight = weight
        elif self.cache == "buffer":
            self.register_buffer("dequantized", weight)
        elif self.cache == "dict":
            self.saved["weight"] = weight
        return x @ (weight if self.no_transpose else weight.T)


class PackedLinearNumpyStyle(torch.nn.Module):
    """Another correct form: bytes built with arithmetic (low + 16 * high), weight in fp16."""

    def __init__(self, codes, scales, zeros, group_size):
        super().__init__()
        pairs = codes.long().reshape(codes.shape[0], -1, 2)
        self.packed = (pairs[..., 0] + 16 * pairs[..., 1]).to(torch.uint8)
        self.scales, self.zeros, self.group_size = scales, zeros, group_size

    def forward(self, x):
        codes = torch.stack((self.packed % 16, self.packed // 16), -1).reshape(
            self.packed.shape[0], -1, self.group_size).double()
        weight = (codes - self.zeros.double()[..., None]) * self.scales.double()[..., None]
        return (x.double() @ weight.reshape(self.packed.shape[0], -1).T).float()


def test_exercise_3_accepts_right_answers_in_their_forms(capsys):
    answers = (PackedLinear, PackedLinearNumpyStyle, check.PackedInt4LinearReference)
    for answer in answers:
        assert check.exercise_packed_int4(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == len(answers)


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(swap_pack=True), "nibbles are swapped"),
        (dict(halves=True), "columns j and j \\+ in/2"),
        (dict(dtype=torch.int8), "torch.int8; store bytes, torch.uint8"),
        (dict(keep_codes=True), "keeps codes besides them"),
        (dict(swap_unpack=True), "reads the nibbles the other way round"),
        (dict(signed_read=True), "16 too low"),
        (dict(repeat=True), "repeat_interleave, not repeat"),
        (dict(no_zero=True), "zero points are not subtracted"),
        (dict(zero_after=True), "subtracted after scaling"),
        (dict(no_transpose=True), "The output is x @ W\\^T"),
        (dict(cache="attribute"), "keeps weight after forward"),
        (dict(cache="buffer"), "keeps dequantized after forward"),
        (dict(cache="dict"), "keeps saved\\['weight'\\] after forward"),
    ],
)
def test_exercise_3_rejects_likely_mistakes(switch, match):
    fails(check.exercise_packed_int4, lambda *args: PackedLinear(*args, **switch), match)


def test_exercise_3_rejects_codes_kept_one_per_byte_or_not_kept():
    class OnePerByte(PackedLinear):
        def __init__(self, codes, *args):
            super().__init__(codes, *args)
            self.packed = codes.to(torch.uint8)

    fails(check.exercise_packed_int4, OnePerByte, r"has shape \(6, 32\), expected \(6, 16\)")

    class Unpacked(torch.nn.Module):
        def __init__(self, codes, scales, zeros, group_size):
            super().__init__()
            self.weight = torch.nn.Parameter(check._dequantized(codes, scales, zeros,
                                                                group_size).float())

    fails(check.exercise_packed_int4, Unpacked, "no tensor `packed`")


def test_exercise_3_on_the_stub_returns_the_fallback(capsys):
    fallback = check.exercise_packed_int4(stub)
    assert fallback is check.PackedInt4LinearReference
    assert "not done yet" in capsys.readouterr().out


def test_exercise_3_cases_hold_high_nibbles_that_set_the_sign_bit():
    for *_, codes, _, _, _, _ in ((None, *case) for case in check._packed_cases()):
        assert bool((codes[:, 1::2] >= 8).any()) and int(codes.max()) == 15


# ---------------------------------------------------------------- Exercise 4: the STE


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


def test_exercise_4_accepts_right_answers_in_their_forms(capsys):
    answers = (ste_detach, ste_detach_other_way, ste_function, ste_own_round,
               check.fake_quant_ste_reference)
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
)
def test_exercise_4_rejects_likely_mistakes(answer, match):
    fails(check.exercise_straight_through, answer, match)


def test_exercise_4_on_the_stub_returns_the_fallback(capsys):
    fallback = check.exercise_straight_through(stub)
    assert fallback is check.fake_quant_ste_reference
    assert "not done yet" in capsys.readouterr().out
    weight = torch.randn(4, 16, requires_grad=True)
    fallback(weight, 4, 8).sum().backward()
    assert torch.equal(weight.grad, torch.ones_like(weight))


def test_exercise_4_mistakes_differ_where_the_check_looks():
    """Each case's symmetric, per-row and group-wise grids give different values, and the
    naive fake quantization's gradient is non-zero only at groups' ends (so the check must
    look inside the groups to call it zero)."""
    for _, weight, bits, group_size, incoming in check._ste_cases():
        right = fake_quantize(weight, bits, granularity=group_size)
        for wrong in (weight, fake_quantize(weight, bits, symmetric=True, granularity=group_size),
                      fake_quantize(weight, bits)):
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
