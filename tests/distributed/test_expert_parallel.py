"""Expert parallelism computes what the single-process MoE layer computes, forward and backward,
and sends the bytes the planner's formula counts."""

import pytest
import torch

from llmlab.distributed import expert_parallel as ep_module
from llmlab.distributed import launch
from llmlab.distributed.expert_parallel import ExpertParallelMoE
from llmlab.distributed.harness.experts_and_context import expert_parallel_differences
from llmlab.models.moe import MoELayer
from llmlab.scale.comm_cost import expert_parallel_bytes

HIDDEN, FF, EXPERTS, TOKENS = 8, 12, 12, 10


def _against_one_process(capacity_factor, broken: str = "") -> dict:
    """This rank's largest differences from the whole layer, with `broken` made first."""
    if broken == "no backward all-to-all":  # each gradient stays on the rank it arrived at
        ep_module.AllToAll.backward = staticmethod(lambda ctx, grad: (grad, None, None, None))
    if broken == "local expert ids":  # the received ids read as this rank's own numbering
        ExpertParallelMoE.__init__ = _numbered_locally(ExpertParallelMoE.__init__)
    differences = expert_parallel_differences(HIDDEN, FF, EXPERTS, TOKENS, capacity_factor)
    del differences["sent bytes"]
    return differences


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
