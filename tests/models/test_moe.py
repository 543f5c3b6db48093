"""The MoE layer computes what transformers' Mixtral and Qwen2-MoE blocks compute, drops the
choices over an expert's capacity in the stated order, and balances its experts both ways."""

import pytest
import torch
from transformers import MixtralConfig, Qwen2MoeConfig
from transformers.models.mixtral.modeling_mixtral import (
    MixtralSparseMoeBlock,
    load_balancing_loss_func,
)
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

from llmlab.models import build_model
from llmlab.models.moe import (
    MoEFeedForward,
    MoELayer,
    Routing,
    expert_capacity,
    load_balancing_loss,
    load_transformers_experts,
    moe_layers,
    route,
    with_experts,
)
from llmlab.models.presets import ModelShape

HIDDEN, FF, EXPERTS, TOP_K = 16, 24, 6, 2


def _transformers_block(family: str, norm_topk_prob: bool = True):
    torch.manual_seed(0)
    if family == "mixtral":
        block = MixtralSparseMoeBlock(MixtralConfig(
            hidden_size=HIDDEN, intermediate_size=FF, num_local_experts=EXPERTS,
            num_experts_per_tok=TOP_K))
    else:
        block = Qwen2MoeSparseMoeBlock(Qwen2MoeConfig(
            hidden_size=HIDDEN, moe_intermediate_size=FF, shared_expert_intermediate_size=FF,
            num_experts=EXPERTS, num_experts_per_tok=TOP_K, norm_topk_prob=norm_topk_prob))
    for p in block.parameters():  # the expert tensors start uninitialised (torch.empty)
        torch.nn.init.normal_(p, std=0.3)
    if family == "qwen2_moe":
        torch.nn.init.zeros_(block.shared_expert.down_proj.weight)  # the routed experts alone
    return block.eval()


def _largest_differences(family: str, norm_topk_prob: bool = True, **options) -> dict:
    block = _transformers_block(family, norm_topk_prob)
    layer = load_transformers_experts(MoELayer(HIDDEN, FF, EXPERTS, TOP_K, **options), block)
    x = torch.randn(3, 10, HIDDEN, generator=torch.Generator().manual_seed(1))
    out, routing = layer(x)
    with torch.no_grad():
        expected = block(x)
        expected_logits = block.gate(x)[0]
    return {"output": (out - x - expected).abs().max().item(),  # the block has no residual
            "router logits": (routing.logits - expected_logits).abs().max().item()}


@pytest.mark.parametrize("family,norm_topk_prob,options", [
    ("mixtral", True, {}),
    ("mixtral", True, {"softmax": "after_top_k"}),  # the same weights, the other way round
    ("qwen2_moe", True, {}),
    ("qwen2_moe", False, {"renormalize": False}),
])
def test_the_layer_computes_what_transformers_sparse_moe_blocks_compute(
        family, norm_topk_prob, options):
    differences = _largest_differences(family, norm_topk_prob, **options)
    assert max(differences.values()) < 1e-5, differences


@pytest.mark.parametrize("family,norm_topk_prob,wrong", [
    ("mixtral", True, {"renormalize": False}),  # the k weights not renormalised
    ("qwen2_moe", False, {"softmax": "after_top_k"}),  # the softmax after the top k
    ("qwen2_moe", False, {}),  # renormalised where norm_topk_prob is off
])
def test_the_comparison_refuses_the_wrong_weights(family, norm_topk_prob, wrong):
    differences = _largest_differences(family, norm_topk_prob, **wrong)
    assert differences["output"] > 1e-3, differences
    assert differences["router logits"] < 1e-5  # the logits agree: the weights made the difference


# Tokens whose router logits are the tokens themselves (the router is the identity), chosen so
# that with 3 experts, top 2 and a capacity of 2: token 0 -> (0, 1), 1 -> (0, 2), 2 -> (0, 1),
# 3 -> (1, 0). First choices in token order: expert 0 seats tokens 0 and 1 and is full for token
# 2; expert 1 seats token 3. Second choices: expert 1 seats token 0 and is full for token 2;
# expert 2 seats token 1; expert 0 is full for token 3.
CROWDED = torch.tensor([[3.0, 2, 0], [3, 0, 2], [3, 2, 0], [2, 3, 0]])
CROWDED_KEPT = [[True, True], [True, True], [False, False], [True, False]]


def test_choices_over_capacity_drop_first_choices_first_in_token_order():
    routing = route(CROWDED, top_k=2, capacity=2)
    assert routing.experts.tolist() == [[0, 1], [0, 2], [0, 1], [1, 0]]
    # Seats taken in token order with each token's choices together would seat token 2's
    # second choice (expert 1's second seat) before token 0's.
    assert routing.kept.tolist() == CROWDED_KEPT
    assert route(CROWDED, top_k=2, capacity=4).kept.all()  # expert 0's demand is 4
    assert route(CROWDED, top_k=2).kept.all()  # no capacity, no drops


def test_a_token_with_every_choice_dropped_passes_through_unchanged():
    assert expert_capacity(tokens=4, top_k=2, num_experts=3, capacity_factor=0.75) == 2
    layer = MoELayer(hidden=3, ff=5, num_experts=3, top_k=2, capacity_factor=0.75)
    with torch.no_grad():
        layer.router.weight.copy_(torch.eye(3))
    out, routing = layer(CROWDED)
    assert routing.kept.tolist() == CROWDED_KEPT
    assert torch.equal(out[2], CROWDED[2])
    assert (out[[0, 1, 3]] - CROWDED[[0, 1, 3]]).abs().amin(dim=-1).gt(0).all()  # processed


def test_a_dropped_choice_leaves_only_the_kept_experts_output():
    layer = MoELayer(hidden=3, ff=5, num_experts=3, top_k=2, capacity_factor=0.75)
    with torch.no_grad():
        layer.router.weight.copy_(torch.eye(3))
    out, routing = layer(CROWDED)
    kept_only = CROWDED[3] + routing.weights[3, 0] * layer.experts[1](CROWDED[3])
    torch.testing.assert_close(out[3], kept_only, rtol=0, atol=1e-7)


def _routing(probs: list[list[float]], experts: list[list[int]]) -> Routing:
    probs, experts = torch.tensor(probs), torch.tensor(experts)
    return Routing(probs.log(), probs, experts, torch.ones(experts.shape),
                   torch.ones(experts.shape, dtype=torch.bool))


def test_the_balancing_loss_on_hand_computed_cases():
    uniform = _routing([[0.25] * 4] * 4, [[0, 1], [2, 3], [0, 2], [1, 3]])
    assert load_balancing_loss(uniform).item() == pytest.approx(1.0)
    # Both tokens to expert 0: fractions (1, 0), mean probabilities (0.7, 0.3): 2 * 0.7.
    skewed = _routing([[0.8, 0.2], [0.6, 0.4]], [[0], [0]])
    assert load_balancing_loss(skewed).item() == pytest.approx(1.4)


def test_the_balancing_loss_is_transformers_divided_by_top_k():
    logits = torch.randn(40, EXPERTS, generator=torch.Generator().manual_seed(2))
    ours = load_balancing_loss(route(logits, TOP_K))
    theirs = load_balancing_loss_func((logits,), num_experts=EXPERTS, top_k=TOP_K)
    torch.testing.assert_close(ours * TOP_K, theirs)


def test_the_balance_bias_changes_the_choice_and_not_the_weight():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    routing = route(logits, top_k=1, renormalize=False, balance_bias=torch.tensor([0, 0.5, 0]))
    assert routing.experts.tolist() == [[1]]
    assert routing.weights.item() == pytest.approx(logits.softmax(-1)[0, 1].item())


def test_the_balance_bias_moves_by_the_rate_against_the_load_and_only_in_training():
    layer = MoELayer(hidden=4, ff=5, num_experts=4, top_k=1, bias_rate=0.01)
    with torch.no_grad():
        layer.router.weight.copy_(torch.eye(4))
    tokens = torch.eye(4)[[0, 0, 0, 1]]  # loads (3, 1, 0, 0): a mean of 1
    layer.eval()(tokens)
    assert layer.load.sum() == 0  # evaluation is not a training step
    layer.train()(tokens)
    assert layer.load.tolist() == [3, 1, 0, 0]
    layer.update_balance_bias()
    assert layer.balance_bias.tolist() == pytest.approx([-0.01, 0.0, 0.01, 0.01])
    assert layer.load.sum() == 0


def test_the_balance_bias_evens_out_a_skewed_router():
    torch.manual_seed(0)
    layer = MoELayer(hidden=8, ff=4, num_experts=4, top_k=1, bias_rate=0.01)
    with torch.no_grad():
        layer.router.weight.mul_(0.3)
        layer.router.weight[0] += 0.3  # expert 0 wins for every token
    tokens = torch.randn(200, 8).abs()
    before = layer.train().route(tokens)
    for _ in range(50):
        layer.update_balance_bias()
        layer.route(tokens)
    after = layer.route(tokens)
    count = lambda routing: torch.bincount(routing.experts[:, 0], minlength=4)  # noqa: E731
    assert count(before).max() > 150 and count(after).max() < 80, (count(before), count(after))


def test_an_unknown_softmax_order_is_named():
    with pytest.raises(ValueError, match="softmax must be one of"):
        route(CROWDED, top_k=1, softmax="after")


def test_the_weight_scale_multiplies_the_weights_and_not_the_choice():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    plain = route(logits, top_k=1, renormalize=False)
    scaled = route(logits, top_k=1, renormalize=False, weight_scale=4.0)
    assert scaled.experts.tolist() == plain.experts.tolist()
    assert scaled.weights.item() == pytest.approx(4 * plain.weights.item())


SMALL = ModelShape("llama", 2, 16, 2, 40, context=12, d_ff=8)


def test_with_experts_puts_a_layer_in_every_blocks_mlp_place_and_records_training_only():
    model = with_experts(build_model(SMALL, seed=0), num_experts=4, top_k=1, ff=8,
                         capacity_factor=1.0)
    layers = moe_layers(model)
    assert len(layers) == 2 and all(isinstance(layer, MoEFeedForward) for layer in layers)
    ids = torch.randint(40, (3, 12), generator=torch.Generator().manual_seed(0))
    model(ids)
    assert [len(layer.loads) for layer in layers] == [1, 1]
    assert all(layer.loads[0].sum() == 36 for layer in layers)  # every token's one choice
    model.eval()
    model(ids)
    assert [len(layer.loads) for layer in layers] == [1, 1]  # evaluation records nothing


def test_the_balancing_loss_reaches_the_router_as_if_added_to_the_training_loss():
    """With AddToLoss inside the model, backward on the model's loss alone gives the router the
    gradient of loss + weight x balancing loss, computed here by hand from the same routing."""
    ids = torch.randint(40, (2, 12), generator=torch.Generator().manual_seed(1))
    weight = 0.5
    inside = with_experts(build_model(SMALL, seed=0), num_experts=4, top_k=2, ff=8,
                          aux_weight=weight)
    inside(ids, labels=ids).loss.backward()
    by_hand = with_experts(build_model(SMALL, seed=0), num_experts=4, top_k=2, ff=8)
    routings = []
    for layer in moe_layers(by_hand):
        original = layer.layer.route  # the same routing, kept for the loss by hand

        def keep(tokens, original=original):
            routings.append(original(tokens))
            return routings[-1]

        layer.layer.route = keep
    loss = by_hand(ids, labels=ids).loss
    (loss + weight * sum(load_balancing_loss(r) for r in routings)).backward()
    for mine, theirs in zip(moe_layers(inside), moe_layers(by_hand), strict=True):
        torch.testing.assert_close(mine.layer.router.weight.grad, theirs.layer.router.weight.grad)
    without = with_experts(build_model(SMALL, seed=0), num_experts=4, top_k=2, ff=8)
    without(ids, labels=ids).loss.backward()
    assert not torch.allclose(moe_layers(without)[0].layer.router.weight.grad,
                              moe_layers(inside)[0].layer.router.weight.grad)
