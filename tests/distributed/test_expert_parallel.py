"""Expert parallelism computes what the single-process MoE layer computes, forward and backward,
and sends the bytes the planner's formula counts."""

import copy

import pytest
import torch
import torch.distributed as dist

from llmlab.distributed import expert_parallel as ep_module
from llmlab.distributed import launch
from llmlab.distributed.expert_parallel import ExpertParallelMoE
from llmlab.models.moe import MoELayer
from llmlab.scale.comm_cost import expert_parallel_bytes

HIDDEN, FF, EXPERTS, TOKENS = 8, 12, 12, 10


def _against_one_process(capacity_factor, broken: str = "") -> dict:
    """Each rank's tokens through the split layer, against the whole layer on the same tokens:
    the largest differences of outputs and gradients."""
    if broken == "no backward all-to-all":  # each gradient stays on the rank it arrived at
        ep_module.AllToAll.backward = staticmethod(lambda ctx, grad: (grad, None, None, None))
    if broken == "local expert ids":  # the received ids read as this rank's own numbering
        ExpertParallelMoE.__init__ = _numbered_locally(ExpertParallelMoE.__init__)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same layer and every rank's tokens, on every rank
    whole = MoELayer(HIDDEN, FF, EXPERTS, top_k=2, capacity_factor=capacity_factor)
    with torch.no_grad():
        whole.router.weight.mul_(3)  # spread the choices unevenly over the ranks
    split = ExpertParallelMoE(copy.deepcopy(whole))
    inputs = [torch.randn(TOKENS + 3 * r, HIDDEN) for r in range(world)]  # uneven token counts
    upstream = [torch.randn(x.shape) for x in inputs]  # an uneven output gradient
    # The whole layer, rank by rank: capacity applies to each rank's tokens.
    references = [x.clone().requires_grad_(True) for x in inputs]
    sum((whole(x)[0] * g).sum() for x, g in zip(references, upstream, strict=True)).backward()
    x = inputs[rank].clone().requires_grad_(True)
    out, _ = split(x)
    (out * upstream[rank]).sum().backward()
    router_grad = split.layer.router.weight.grad
    dist.all_reduce(router_grad)  # as data parallelism sums the replicated router's gradient
    expected_out = whole(inputs[rank])[0]
    expert_grads = [
        (mine.weight.grad - theirs.weight.grad).abs().max().item()
        for e, expert in enumerate(split.layer.experts)
        for mine, theirs in zip(expert.children(), whole.experts[split.first + e].children(),
                                strict=True)
    ]
    routing = whole.route(inputs[rank])
    return {
        "dropped": (~routing.kept).sum().item(),
        "output": (out - expected_out).abs().max().item(),
        "input grad": (x.grad - references[rank].grad).abs().max().item(),
        "router grad": (router_grad - whole.router.weight.grad).abs().max().item(),
        "expert grads": max(expert_grads),
    }


@pytest.mark.parametrize("nprocs", [2, 3, 4])
@pytest.mark.parametrize("capacity_factor", [None, 0.75])
def test_expert_parallel_matches_one_process_forward_and_backward(nprocs, capacity_factor):
    # 12 experts: 2, 3 and 4 ranks hold 6, 4 and 3 each.
    for differences in launch(_against_one_process, nprocs=nprocs, args=(capacity_factor,),
                              timeout_s=60):
        dropped = differences.pop("dropped")
        assert max(differences.values()) < 1e-5, differences
        assert (dropped > 0) == (capacity_factor is not None)


def _numbered_locally(init):
    def wrong_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.first = 0
    return wrong_init


@pytest.mark.parametrize("broken,wrong", [("local expert ids", "output"),
                                          ("no backward all-to-all", "input grad")])
def test_the_comparison_refuses_a_broken_split(broken, wrong):
    differences = launch(_against_one_process, nprocs=2, args=(0.75, broken), timeout_s=60)[1]
    assert differences[wrong] > 1e-3, differences


def _bytes_sent_on_balanced_routing(tokens: int) -> int:
    """Token t chooses experts t mod 4 and t + 1 mod 4 (the router is the identity): every
    expert gets the same number of choices from every rank."""
    layer = MoELayer(hidden=4, ff=6, num_experts=4, top_k=2)
    with torch.no_grad():
        layer.router.weight.copy_(torch.eye(4))
    t = torch.arange(tokens)
    x = 10 * torch.eye(4)[t % 4] + 5 * torch.eye(4)[(t + 1) % 4]
    split = ExpertParallelMoE(layer)
    split(x)
    return split.sent_bytes


@pytest.mark.parametrize("nprocs", [2, 4])
def test_the_bytes_sent_are_the_planners_on_balanced_routing(nprocs):
    formula = expert_parallel_bytes(tokens=8, top_k=2, hidden=4, ep=nprocs, dtype_bytes=4)
    measured = launch(_bytes_sent_on_balanced_routing, nprocs=nprocs, args=(8,), timeout_s=60)
    assert measured == [formula["sent"]] * nprocs
    assert formula["sent"] == 2 * 8 * 2 * 4 * 4 * (nprocs - 1) / nprocs  # dispatch and combine


def _three_ranks_and_four_experts() -> str:
    with pytest.raises(ValueError) as error:
        ExpertParallelMoE(MoELayer(4, 6, num_experts=4))
    return str(error.value)


def test_a_rank_count_that_does_not_divide_the_experts_is_refused():
    messages = launch(_three_ranks_and_four_experts, nprocs=3, timeout_s=60)
    assert messages == ["3 ranks do not divide the layer's 4 experts"] * 3
