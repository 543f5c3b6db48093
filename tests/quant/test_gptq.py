"""Reference GPTQ against RTN on a random Linear with correlated calibration inputs: a lower
output error at the same bits and group size, RTN exactly when the Hessian is diagonal (no
error feedback possible), the same result for any lazy-batch block size, dead input columns,
and the errors for bad input (NaN or inf in the weight or the calibration inputs, a damping that
cannot invert the Hessian: llmlab's message, never linalg's)."""

import importlib
import inspect
import math

import pytest
import torch
from torch import nn

from llmlab.quant import gptq, gptq_linear, hessian, inverse_hessian_factor, rtn

gptq_module = importlib.import_module("llmlab.quant.gptq")  # the name `gptq` is the function


@pytest.fixture(scope="module")
def layer():
    """A Linear(256 -> 128) and 2048 calibration tokens whose features are correlated (a random
    mixing) and of unequal size, as a transformer's activations are."""
    torch.manual_seed(0)
    features = 256
    mixing = torch.randn(features, features) / features**0.5
    inputs = torch.randn(2048, features) @ mixing + 0.1 * torch.randn(2048, features)
    inputs = inputs * torch.rand(features) * 3
    linear = nn.Linear(features, 128, bias=False)
    return linear, inputs


def output_error(linear, inputs, weight):
    """||X W^T - X Q^T||_F / ||X W^T||_F."""
    reference = inputs @ linear.weight.detach().T
    return float((reference - inputs @ weight.T).norm() / reference.norm())


def test_hessian_is_twice_the_input_covariance(layer):
    _, inputs = layer
    h = hessian([inputs[:1000], inputs[1000:].view(2, -1, inputs.shape[1])])  # any batching
    expected = 2 * inputs.T.double() @ inputs.double() / len(inputs)
    assert torch.allclose(h.double(), expected, rtol=1e-5)
    u = inverse_hessian_factor(h, damp=0)
    assert torch.equal(u, u.triu())
    assert torch.allclose(u.T @ u @ h, torch.eye(len(h)), atol=1e-3)


@pytest.mark.parametrize("bits, group_size", [(4, 64), (3, 128), (4, 256)])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_beats_rtn(layer, bits, group_size, act_order):
    linear, inputs = layer
    baseline = output_error(linear, inputs, rtn(linear.weight, bits, group_size).dequantize())
    q = gptq_linear(linear, [inputs], bits=bits, group_size=group_size, act_order=act_order)
    assert q.codes.shape == linear.weight.shape and q.scales.shape == (128, 256 // group_size)
    assert output_error(linear, inputs, q.dequantize()) < 0.85 * baseline


@pytest.mark.parametrize("act_order", [False, True])
def test_diagonal_hessian_gives_rtn(layer, act_order):
    """Uncorrelated inputs: H^-1 is diagonal, no column can compensate for another, and GPTQ
    must reduce to round-to-nearest, code for code."""
    linear, inputs = layer
    diagonal = torch.diag(hessian([inputs]).diagonal())
    q = gptq(linear.weight, diagonal, 4, 64, act_order=act_order)
    reference = rtn(linear.weight, 4, 64)
    assert torch.equal(q.codes, reference.codes)
    assert torch.equal(q.scales, reference.scales) and torch.equal(q.zeros, reference.zeros)


def test_lazy_batch_blocks_change_nothing(layer):
    linear, inputs = layer
    h = hessian([inputs])
    one_by_one = gptq(linear.weight, h, 4, 32, block_size=32)
    all_at_once = gptq(linear.weight, h, 4, 32, block_size=256)
    assert (one_by_one.codes == all_at_once.codes).float().mean() > 0.999  # float order can flip
    assert torch.allclose(one_by_one.scales, all_at_once.scales, rtol=1e-4)  # a rare rounding


def test_dead_input_columns(layer):
    linear, inputs = layer
    inputs = inputs.clone()
    inputs[:, :3] = 0  # features no token ever uses
    q = gptq_linear(linear, [inputs], bits=4, group_size=64)
    weight = q.dequantize()
    assert torch.isfinite(weight).all() and (weight[:, :3] == 0).all()
    baseline = output_error(linear, inputs, rtn(linear.weight, 4, 64).dequantize())
    assert output_error(linear, inputs, weight) < baseline


def test_bad_input(layer):
    linear, inputs = layer
    with pytest.raises(ValueError, match="calibration inputs .* got none"):
        gptq_linear(linear, [])
    with pytest.raises(ValueError, match="got none"):
        gptq_linear(linear, [inputs[:0]])
    with pytest.raises(ValueError, match="have 64 features, the Linear takes 256"):
        gptq_linear(linear, [inputs[:, :64]])
    with pytest.raises(ValueError, match="group size 96 does not divide"):
        gptq_linear(linear, [inputs], group_size=96)
    with pytest.raises(ValueError, match="multiple of the group size"):
        gptq_linear(linear, [inputs], group_size=64, block_size=96)
    with pytest.raises(ValueError, match="integer group size"):
        gptq_linear(linear, [inputs], group_size="channel")
    with pytest.raises(ValueError, match=r"has shape \(0, 256\): no values"):
        gptq(linear.weight[:0], hessian([inputs]))
    with pytest.raises(ValueError, match="Hessian shape"):
        gptq(linear.weight, hessian([inputs[:, :64]]))
    with pytest.raises(ValueError, match="bits must be from 2 to 8"):
        gptq_linear(linear, [inputs], bits=16)


def test_non_finite_numbers_and_bad_damping_get_a_clear_error(layer):
    linear, inputs = layer
    poisoned = inputs.clone()
    poisoned[5, 7] = torch.nan
    with pytest.raises(ValueError, match=r"calibration input 1 holds 1 NaN or inf value\(s\), "
                       r"the first at index \(5, 7\)"):
        gptq_linear(linear, [inputs, poisoned])
    h = hessian([inputs])
    overflowed = h.clone()
    overflowed[3, 3] = torch.inf
    with pytest.raises(ValueError, match="the Hessian .* holds 1 NaN or inf"):
        gptq(linear.weight, overflowed)
    weight = linear.weight.detach().clone()
    weight[0, 9] = torch.nan
    with pytest.raises(ValueError, match=r"the weight to quantize holds 1 NaN or inf value\(s\)"):
        gptq(weight, h)
    for damp in (-0.1, math.nan, math.inf, "0.01"):
        with pytest.raises(ValueError, match="damp must be a number >= 0"):
            gptq(linear.weight, h, damp=damp)
    few = hessian([inputs[:8]])  # 8 tokens for 256 features: H has rank 8
    with pytest.raises(ValueError, match="cannot be inverted .* raise damp"):
        gptq(linear.weight, few, damp=0)
    gptq(linear.weight, few, damp=0.01)  # the damping is what makes it invertible


def test_without_error_feedback_gptq_is_no_better_than_rtn(layer):
    """What test_gptq_beats_rtn checks is the error feedback: GPTQ's own source with its two
    feedback lines (inside a block, to later blocks) removed is exactly RTN, and no better."""
    source = inspect.getsource(gptq_module.gptq)
    kept = [line for line in source.splitlines() if "# feedback" not in line]
    assert len(kept) == len(source.splitlines()) - 2
    namespace = dict(vars(gptq_module))
    exec("\n".join(kept), namespace)  # noqa: S102 - the library's own source, two lines fewer
    linear, inputs = layer
    reference = rtn(linear.weight, 4, 64)
    q = namespace["gptq"](linear.weight, hessian([inputs]), 4, 64)
    assert torch.equal(q.codes, reference.codes)
    baseline = output_error(linear, inputs, reference.dequantize())
    assert output_error(linear, inputs, q.dequantize()) >= 0.99 * baseline
