"""Lab 11's checks accept correct answers in several forms and reject the likely mistakes, each with
the hint that names it. The ring attention check runs the code in forked gloo processes.
(tests/course/checks/test_every_lab.py proves they pass on the solution notebook and say "not
done yet" on the generated stub.)"""

import math

import pytest
import torch
import torch.distributed as dist

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab11 as check
from llmlab.distributed.context_parallel import block_attention, pass_to_next

# ---------------------------------------------------------------- Exercise 1: MoE forward


def _moe(x, router, experts, top_k, capacity=None, *, renormalize=True, softmax_twice=False,
         residual=True, passthrough=True, token_major=False, extra_seats=0):
    """An MoE forward written token by token, with one switch per likely mistake."""
    probs = router(x).softmax(dim=-1)
    weights, chosen = probs.topk(top_k, dim=-1)
    if softmax_twice:
        weights = weights.softmax(dim=-1)
    elif renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    order = [(t, c) for t in range(len(x)) for c in range(top_k)]
    if not token_major:
        order.sort(key=lambda tc: tc[1])  # every first choice, then every second...
    taken, kept = [0] * len(experts), set()
    for t, c in order:
        e = int(chosen[t, c])
        if capacity is None or taken[e] < capacity + extra_seats:
            taken[e] += 1
            kept.add((t, c))
    out = torch.zeros_like(x)
    for t, c in kept:
        out[t] += weights[t, c] * experts[int(chosen[t, c])](x[t:t + 1])[0]
    if residual:
        if passthrough:
            out = out + x
        else:
            out = out + x * torch.tensor([any((t, c) in kept for c in range(top_k))
                                          for t in range(len(x))])[:, None]
    return out


def _moe_softmax_of_top_logits(x, router, experts, top_k, capacity=None):
    """Another correct form: the softmax over the top k logits (the same weights), numpy out."""
    logits = router(x)
    top, chosen = logits.topk(top_k, dim=-1)
    from llmlab.models.moe import Routing, combine, seat_order
    kept = torch.ones_like(chosen, dtype=torch.bool)
    if capacity is not None:
        kept = seat_order(chosen, logits.shape[-1]) < capacity
    routing = Routing(logits, logits.softmax(-1), chosen, top.softmax(dim=-1), kept)
    return (x + combine(x, routing, experts)).numpy()


@pytest.mark.parametrize("moe_forward", [_moe, _moe_softmax_of_top_logits])
def test_the_moe_check_passes_correct_forms(moe_forward, capsys):
    assert check.exercise_moe_forward(moe_forward) is moe_forward
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("mistake,hint", [
    ({"renormalize": False}, "sum to 1"),
    ({"softmax_twice": True}, "two softmaxes"),
    ({"residual": False}, "input is missing"),
    ({"passthrough": False}, "came out as zeros"),
    ({"token_major": True}, "token order"),
    ({"extra_seats": 1}, "one choice more"),
    ({"extra_seats": -1}, "one choice fewer"),
    ({"extra_seats": math.inf}, "nothing was dropped"),
])
def test_the_moe_check_names_each_mistake(mistake, hint):
    def wrong(x, router, experts, top_k, capacity=None):
        return _moe(x, router, experts, top_k, capacity, **mistake)

    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_moe_forward(wrong)


def test_the_moe_check_names_the_input_when_the_code_raises():
    def broken(x, router, experts, top_k, capacity=None):
        raise IndexError("index 7 is out of bounds")

    with pytest.raises(ExerciseFailed, match=r"moe_forward\(x, router.*raised IndexError"):
        check.exercise_moe_forward(broken)


# ---------------------------------------------------------------- Exercise 2: EP bytes


def test_the_bytes_check_passes_the_formula_and_names_each_mistake(capsys):
    def right(tokens, top_k, hidden, ep, dtype_bytes):
        return 2 * tokens * top_k * hidden * dtype_bytes * (ep - 1) // ep  # any real type

    check.exercise_ep_bytes(right)
    assert "PASSED" in capsys.readouterr().out
    for wrong, hint in [
        (lambda n, k, h, ep, b: n * k * h * b * (ep - 1) / ep, "one direction"),
        (lambda n, k, h, ep, b: 2 * n * k * h * b, "never leave"),
        (lambda n, k, h, ep, b: 2 * n * h * b * (ep - 1) / ep, "top_k copies"),
        (lambda n, k, h, ep, b: 16 * n * k * h * b * (ep - 1) / ep, "bits"),
    ]:
        with pytest.raises(ExerciseFailed, match=hint):
            check.exercise_ep_bytes(wrong)


# ---------------------------------------------------------------- Exercise 3: ring attention


def _ring(q, k, v, *, merge="rescale", mask="diagonal", skip_future=True):
    """Ring attention with one switch per likely mistake (all default: a correct one)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    kv, out, lse = torch.stack([k, v]), None, None
    for step in range(world):
        source = (rank - step) % world
        if source <= rank or not skip_future:
            causal = {"diagonal": source == rank, "every": True, "none": False}[mask]
            block_out, block_lse = block_attention(q, kv[0], kv[1], causal=causal)
            if out is None:
                out, lse = block_out, block_lse
            elif merge == "sum":
                out, lse = out + block_out, torch.logaddexp(lse, block_lse)
            else:
                total = torch.logaddexp(lse, block_lse)
                out = out * (lse - total).exp() + block_out * (block_lse - total).exp()
                lse = total if merge == "rescale" else block_lse
        if step < world - 1:
            kv = pass_to_next(kv)
    return out


def _ring_running_max(q, k, v):
    """Another correct form: FlashAttention's running max and running sum, no log-sum-exp."""
    rank, world = dist.get_rank(), dist.get_world_size()
    shape = (*q.shape[:-1], 1)
    top, total, acc = torch.full(shape, -math.inf), torch.zeros(shape), torch.zeros_like(q)
    for step in range(world):
        source = (rank - step) % world
        if source <= rank:
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if source == rank:
                scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1),
                                            -math.inf)
            new_top = torch.maximum(top, scores.amax(dim=-1, keepdim=True))
            weights = (scores - new_top).exp()
            scale = (top - new_top).exp()
            total = total * scale + weights.sum(dim=-1, keepdim=True)
            acc = acc * scale + weights @ v
            top = new_top
        if step < world - 1:
            k, v = pass_to_next(k), pass_to_next(v)
    return acc / total


@pytest.mark.parametrize("ring", [_ring, _ring_running_max])
def test_the_ring_check_passes_correct_forms(ring, capsys):
    assert check.exercise_ring_attention(ring) is ring
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("mistake,hint", [
    ({"merge": "sum"}, "outputs were added"),
    ({"merge": "last"}, "every block so far"),
    ({"mask": "every"}, "mask was applied to every block"),
    ({"mask": "none"}, "was not masked"),
    ({"skip_future": False, "mask": "diagonal"}, "later in the sequence"),
])
def test_the_ring_check_names_each_mistake(mistake, hint):
    def wrong(q, k, v):
        return _ring(q, k, v, **mistake)

    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_ring_attention(wrong)


def test_the_ring_check_shows_the_learners_exception_with_its_rank():
    def broken(q, k, v):
        if dist.get_rank() == 1:
            raise ValueError("shapes do not match")
        return q

    with pytest.raises(ExerciseFailed, match="raised an exception on rank 1"):
        check.exercise_ring_attention(broken)
