"""Checks for Lab 11 (experts and long context), and the versions the lab falls back to.

Exercise 1 runs the learner's MoE forward against transformers' Mixtral block with the same
weights and against llmlab's layer with a capacity; Exercise 3 runs the learner's ring attention
in real gloo processes (`run_on_ranks`) against full causal attention. A wrong answer is matched
against the likely mistakes, each computed here in one process, to say which one it is.
"""

import math
import random

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from llmlab.course.checks import (
    ExerciseFailed,
    call,
    call_or_fail,
    exercise,
    expect_number,
    passed,
    run_on_ranks,
    tensor_of_shape,
)
from llmlab.distributed.context_parallel import (
    block_attention,
    merge_attention,
    ring_attention,
    shard_sequence,
)
from llmlab.models.moe import MoELayer, Routing, combine, load_transformers_experts, route
from llmlab.scale.comm_cost import expert_parallel_bytes

# ---------------------------------------------------------------- Exercise 1: MoE forward

_MOE = "Exercise 1 (an MoE layer's dispatch and combine)"


def moe_forward_reference(x: torch.Tensor, router: nn.Module, experts, top_k: int,
                          capacity: int | None = None) -> torch.Tensor:
    """The lab's fallback for Exercise 1: llmlab's routing (`route`) and `combine`."""
    routing = route(router(x), top_k, capacity=capacity)
    return x + combine(x, routing, experts)


def _mixtral_case(seed: int, hidden: int, ff: int, num_experts: int, top_k: int, tokens: int):
    """A transformers Mixtral block with random weights, the same weights as a router and experts
    the learner's function takes, some tokens, and what the block computes (plus the residual)."""
    from transformers import MixtralConfig  # here: only this check needs transformers' blocks
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    torch.manual_seed(seed)
    block = MixtralSparseMoeBlock(MixtralConfig(
        hidden_size=hidden, intermediate_size=ff, num_local_experts=num_experts,
        num_experts_per_tok=top_k)).eval()
    for p in block.parameters():  # the expert tensors start uninitialised (torch.empty)
        nn.init.normal_(p, std=0.3)
    layer = load_transformers_experts(MoELayer(hidden, ff, num_experts, top_k), block)
    x = torch.randn(tokens, hidden)
    with torch.no_grad():
        expected = x + block(x[None])[0]  # the block returns the mixture; the layer adds x
    return x, layer, expected


def _skewed_case(seed: int, hidden: int, num_experts: int, top_k: int, tokens: int):
    """llmlab's layer with a router that favours some experts: some choices find them full."""
    torch.manual_seed(seed)
    layer = MoELayer(hidden, 2 * hidden, num_experts, top_k)
    with torch.no_grad():
        layer.router.weight.mul_(4).add_(torch.linspace(0, 2, num_experts)[:, None])
    return torch.randn(tokens, hidden), layer


def _token_major_seats(experts: torch.Tensor, num_experts: int) -> torch.Tensor:
    """A wrong seat order: token 0's choices, then token 1's..., instead of every first choice
    before any second one."""
    arrivals = F.one_hot(experts.reshape(-1), num_experts)
    place = (arrivals.cumsum(dim=0) - 1).gather(1, experts.reshape(-1, 1))[:, 0]
    return place.reshape(experts.shape)


def _moe_mistakes(x, layer, top_k, capacity) -> dict[str, torch.Tensor]:
    """What the likely mistakes compute on this case, by name."""
    logits, experts = layer.router(x), list(layer.experts)

    def output(routing: Routing, residual=True, passthrough=True) -> torch.Tensor:
        mixed = combine(x, routing, experts)
        if not residual:
            return mixed
        if not passthrough:  # a token whose every choice was dropped comes out as zeros
            return mixed + x * routing.kept.any(dim=-1, keepdim=True)
        return x + mixed

    right = route(logits, top_k, capacity=capacity)
    double = route(logits, top_k, renormalize=False, capacity=capacity)
    double.weights = double.weights.softmax(dim=-1)
    mistakes = {
        "no residual": output(right, residual=False),
        "not renormalised": output(route(logits, top_k, renormalize=False, capacity=capacity)),
        "softmax twice": output(double),
    }
    if capacity is not None:
        token_major = route(logits, top_k)
        token_major.kept = _token_major_seats(token_major.experts, layer.num_experts) < capacity
        mistakes |= {
            "dropped not passed through": output(right, passthrough=False),
            "token-major seats": output(token_major),
            "no capacity": output(route(logits, top_k)),
            "one seat too many": output(route(logits, top_k, capacity=capacity + 1)),
            "one seat too few": output(route(logits, top_k, capacity=capacity - 1)),
        }
    return mistakes


_MOE_HINTS = {
    "no residual": "the layer's output is its input plus the experts' weighted outputs: the "
                   "input is missing (a token whose choices are all dropped must come out as it "
                   "went in).",
    "not renormalised": "the k weights of a token should sum to 1: after taking the top k of the "
                        "softmax over all experts, divide them by their sum (Mixtral does).",
    "softmax twice": "the weights went through two softmaxes: the top k of the probabilities are "
                     "rescaled by dividing by their sum, not by a second softmax.",
    "dropped not passed through": "a token whose every choice was dropped came out as zeros: "
                                  "it should leave the layer as it came in (the residual).",
    "token-major seats": "the seats went in token order, each token's choices together. The rule "
                         "is every token's first choice (in token order) before anyone's second "
                         "choice: a token's best expert comes first.",
    "no capacity": "nothing was dropped: an expert takes at most `capacity` choices, the rest "
                   "are dropped.",
    "one seat too many": "each expert took one choice more than `capacity`: seats are numbered "
                         "from 0, so places 0 .. capacity - 1 are kept.",
    "one seat too few": "each expert took one choice fewer than `capacity`: places 0 .. "
                        "capacity - 1 are kept, `capacity` seats in all.",
}


def _moe_verdict(moe_forward, x, layer, top_k, capacity, expected, where: str) -> None:
    call_text = f"moe_forward(x, router, experts, top_k={top_k}, capacity={capacity})"
    with torch.no_grad():
        got = call_or_fail(_MOE, call_text, moe_forward, x.clone(), layer.router,
                           list(layer.experts), top_k, capacity)
        got = tensor_of_shape(_MOE, call_text, got, tuple(x.shape), "an output", "the input's")
        if torch.allclose(got, expected, rtol=1e-4, atol=1e-5):
            return
        mistakes = _moe_mistakes(x, layer, top_k, capacity)
    hint = next((_MOE_HINTS[name] for name, wrong in mistakes.items()
                 if torch.allclose(got, wrong, rtol=1e-4, atol=1e-5)), "")
    worst = float((got.float() - expected).abs().max())
    raise ExerciseFailed(f"{_MOE}: {call_text} on {where}: largest difference {worst:.3g} from "
                         f"the reference. {hint}".strip())


@exercise(fallback=moe_forward_reference, fallback_name="llmlab.models.moe route and combine")
def exercise_moe_forward(moe_forward) -> None:
    """Exercise 1: moe_forward(x, router, experts, top_k, capacity) returns x plus each token's
    kept choices' expert outputs, weighted (softmax over all experts, top k, renormalised)."""
    seed = random.randrange(10_000)
    for hidden, ff, num_experts, top_k, tokens in ((16, 24, 6, 2, 13), (12, 20, 5, 1, 9),
                                                   (8, 12, 5, 3, 11)):
        x, layer, expected = _mixtral_case(seed, hidden, ff, num_experts, top_k, tokens)
        where = (f"{tokens} tokens, {num_experts} experts (transformers' Mixtral block with the "
                 "same weights)")
        _moe_verdict(moe_forward, x, layer, top_k, None, expected, where)
    # The tightest capacity first: there every mistake about seats gives its own output (a
    # limit one seat wider can drop nothing where demand exceeds the seats by one only).
    for num_experts, top_k, tokens, factor in ((4, 2, 9, 0.25), (6, 3, 14, 0.5), (4, 2, 19, 1.0)):
        x, layer = _skewed_case(seed, 12, num_experts, top_k, tokens)
        capacity = math.ceil(factor * tokens * top_k / num_experts)
        with torch.no_grad():
            expected = moe_forward_reference(x, layer.router, list(layer.experts), top_k, capacity)
        where = f"{tokens} tokens, {num_experts} experts, {capacity} seats each (llmlab's layer)"
        _moe_verdict(moe_forward, x, layer, top_k, capacity, expected, where)
    passed(_MOE, "equal to transformers' Mixtral block (top 1, 2 and 3 of 5-6 experts) and to "
                 "llmlab's layer with capacities that drop choices and whole tokens")


# ---------------------------------------------------------------- Exercise 2: EP bytes

_BYTES = "Exercise 2 (expert parallelism's bytes)"


def ep_bytes_reference(tokens: int, top_k: int, hidden: int, ep: int, dtype_bytes: int) -> float:
    """The lab's fallback for Exercise 2: the planner's formula."""
    return expert_parallel_bytes(tokens, top_k, hidden, ep, dtype_bytes)["sent"]


@exercise(fallback=ep_bytes_reference, fallback_name="llmlab.scale.comm_cost."
                                                     "expert_parallel_bytes")
def exercise_ep_bytes(ep_bytes) -> None:
    """Exercise 2: ep_bytes(tokens, top_k, hidden, ep, dtype_bytes) is what one MoE layer's forward
    makes one rank send, dispatch and combine, when routing is balanced."""
    rng = random.Random(11)
    for _ in range(6):
        tokens, top_k = rng.randrange(100, 5000), rng.choice((1, 2, 4, 8))
        hidden, ep = rng.choice((512, 4096, 7168)), rng.choice((2, 4, 8, 64))
        dtype_bytes = rng.choice((2, 4))
        call_text = f"ep_bytes({tokens}, {top_k}, {hidden}, {ep}, {dtype_bytes})"
        got = call(_BYTES, ep_bytes, tokens, top_k, hidden, ep, dtype_bytes)
        expected = ep_bytes_reference(tokens, top_k, hidden, ep, dtype_bytes)
        expect_number(_BYTES, call_text, got, expected, rel=1e-6, mistakes=[
            (0.5, "that is one direction: the outputs come back too (dispatch, then combine)."),
            (ep / (ep - 1), "that counts the choices whose expert is on this rank too: they "
                            "never leave it."),
            (1 / top_k, "each token goes to top_k experts: top_k copies travel."),
            (8, "that is in bits: count bytes."),
        ])
    passed(_BYTES, "dispatch and combine, the share that leaves the rank, top_k copies")


# ---------------------------------------------------------------- Exercise 3: ring attention

_RING = "Exercise 3 (ring attention)"
HEAD_DIM, HEADS = 8, 3
CHUNK = 7  # positions per rank: odd, so no mistake hides in an even split


def _qkv(seed: int, seq_len: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, HEADS, seq_len, HEAD_DIM, generator=generator) for _ in range(3))


def _ring_worker(ring_attention_fn, seed: int, seq_len: int):
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = [shard_sequence(t, world)[rank] for t in _qkv(seed, seq_len)]
    with torch.no_grad():
        return ring_attention_fn(*mine)


def _ring_in_one_process(q, k, v, world: int, mistake: str = "") -> list[torch.Tensor]:
    """Each rank's output of ring attention (contiguous split), computed in one process, with
    one likely mistake made (none: the right answer)."""
    qs, ks, vs = (t.chunk(world, dim=-2) for t in (q, k, v))
    outputs = []
    for rank in range(world):
        out = lse = None
        for step in range(world):
            source = (rank - step) % world
            if source > rank and mistake != "future blocks used":
                continue
            causal = {"mask every block": True, "mask no block": False}.get(mistake,
                                                                            source == rank)
            block = block_attention(qs[rank], ks[source], vs[source], causal=causal)
            if out is None:
                out, lse = block
            elif mistake == "plain sum":
                out, lse = out + block[0], torch.logaddexp(lse, block[1])
            elif mistake == "log-sum-exp not carried":
                out, lse = merge_attention(out, lse, *block)[0], block[1]
            else:
                out, lse = merge_attention(out, lse, *block)
        outputs.append(out)
    return outputs


_RING_HINTS = {
    "plain sum": "the blocks' outputs were added. Each block's output is a mean over its own "
                 "keys, weighted by a softmax over those keys alone: before adding, weight each "
                 "by its share of the softmax's denominator over all the keys so far (the "
                 "log-sum-exps say how big each denominator is).",
    "log-sum-exp not carried": "after a merge, the log-sum-exp you carry on must be that of every "
                               "block so far, not the last block's.",
    "mask every block": "the causal mask was applied to every block. A block from an earlier "
                        "rank is wholly in the past: every query sees all of it. Only the block "
                        "of the rank's own positions needs the mask.",
    "mask no block": "the block of the rank's own positions was not masked: there, query i must "
                     "not see the keys after i.",
    "future blocks used": "blocks from ranks later in the sequence were used: they are wholly in "
                          "the future of every query of this rank, so they add nothing.",
}


def _ring_verdict(outputs: list, seed: int, world: int) -> None:
    q, k, v = _qkv(seed, CHUNK * world)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = shard_sequence(full, world)
    wrong = []
    for rank, got in enumerate(outputs):
        got = tensor_of_shape(_RING, f"ring_attention(q, k, v) on rank {rank} of {world}", got,
                              tuple(expected[rank].shape), "an output", "the queries'")
        if not torch.allclose(got, expected[rank], rtol=1e-4, atol=1e-5):
            wrong.append((rank, got))
    if not wrong:
        return
    ranks = [rank for rank, _ in wrong]
    hint = ""
    for mistake, text in _RING_HINTS.items():
        made = _ring_in_one_process(q, k, v, world, mistake)
        if all(torch.allclose(got, made[rank], rtol=1e-4, atol=1e-5) for rank, got in wrong):
            hint = text
            break
    worst = max(float((got - expected[rank]).abs().max()) for rank, got in wrong)
    raise ExerciseFailed(
        f"{_RING}: with {world} ranks of {CHUNK} positions each, rank(s) {ranks} differ from "
        f"full causal attention (largest difference {worst:.3g}). {hint}".strip())


@exercise(fallback=ring_attention, fallback_name="llmlab.distributed.context_parallel."
                                                 "ring_attention")
def exercise_ring_attention(ring_attention_fn) -> None:
    """Exercise 3: ring_attention(q, k, v) on each rank's contiguous part of the sequence equals
    that part of full causal attention."""
    seed = random.randrange(10_000)
    for world in tqdm((2, 3, 4), desc="ranks", leave=False):  # each a fresh set of processes
        outputs = run_on_ranks(_RING, _ring_worker, world, ring_attention_fn, seed,
                               CHUNK * world)
        _ring_verdict(outputs, seed, world)
    passed(_RING, f"equal to full causal attention (scaled_dot_product_attention) on 2, 3 and "
                  f"4 ranks of {CHUNK} positions each")


NOTEBOOK = "11_experts_and_context.ipynb"
# The function each exercise asks for -> its check (tests/course/checks/test_every_lab.py).
EXERCISES = {
    "moe_forward": exercise_moe_forward,
    "ep_bytes": exercise_ep_bytes,
    "ring_attention": exercise_ring_attention,
}
