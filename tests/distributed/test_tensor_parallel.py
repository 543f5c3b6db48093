"""Tensor parallelism: the hand-written MLP, and the parallelize_module plan computing what the
unsplit model computes, with the collectives the formulas count. (Training runs under the plan,
against one process: tests/distributed/harness/test_model_parallel.py.)"""

from functools import partial

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

from llmlab.distributed import LaunchError, launch
from llmlab.distributed import tensor_parallel as tp_module
from llmlab.distributed.data_parallel import full_parameters
from llmlab.distributed.harness.equivalence import SMOKE_SHAPE
from llmlab.distributed.harness.model_parallel import train_tensor_parallel
from llmlab.distributed.mesh import device_mesh
from llmlab.distributed.tensor_parallel import (
    ColumnRowParallelMLP,
    apply_tensor_parallel,
    gpt2_layout,
    prepare_for_tensor_parallel,
    tensor_parallel_plan,
)
from llmlab.memory import TrainingSetup, estimate_memory
from llmlab.models import build_model, model_shape, preset
from llmlab.scale import Parallel
from llmlab.scale.comm_cost import tensor_parallel_bytes


def _mlp_against_unsplit(broken: str):
    """Run the split MLP and the unsplit one on the same input; return the largest differences."""
    if broken == "no f":  # the backward all-reduce of the input's gradient left out
        tp_module.CopyToTensorParallel.backward = staticmethod(lambda ctx, grad: (grad, None))
    if broken == "no g":  # the forward all-reduce of the partial outputs left out
        tp_module.ReduceFromTensorParallel.forward = staticmethod(lambda ctx, x, group: x)
    torch.manual_seed(0)  # the same full layers and input on every rank
    fc_in, fc_out = nn.Linear(12, 32), nn.Linear(32, 12)
    x = torch.randn(3, 5, 12, requires_grad=True)
    split = ColumnRowParallelMLP(fc_in, fc_out)
    y = split(x)
    (y * torch.linspace(-1, 1, 12)).sum().backward()  # an uneven output gradient
    x_ref = x.detach().clone().requires_grad_(True)
    y_ref = fc_out(F.gelu(fc_in(x_ref)))
    (y_ref * torch.linspace(-1, 1, 12)).sum().backward()
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = slice(rank * 32 // world, (rank + 1) * 32 // world)
    return {
        "output": (y - y_ref).abs().max().item(),
        "input grad": (x.grad - x_ref.grad).abs().max().item(),
        "w_in grad": (split.w_in.grad - fc_in.weight.grad[mine]).abs().max().item(),
        "w_out grad": (split.w_out.grad - fc_out.weight.grad[:, mine]).abs().max().item(),
        "b_out grad": (split.b_out.grad - fc_out.bias.grad).abs().max().item(),
    }


@pytest.mark.parametrize("nprocs", [2, 4])
def test_hand_written_column_row_mlp_matches_the_unsplit_mlp(nprocs):
    for errors in launch(_mlp_against_unsplit, nprocs=nprocs, args=("",), timeout_s=60):
        assert max(errors.values()) < 1e-6, errors


@pytest.mark.parametrize("broken,wrong", [("no f", "input grad"), ("no g", "output")])
def test_the_mlp_check_catches_a_missing_communication_op(broken, wrong):
    errors = launch(_mlp_against_unsplit, nprocs=2, args=(broken,), timeout_s=60)[0]
    assert errors[wrong] > 1e-3, errors


def test_prepared_gpt2_computes_the_same_and_maps_back_to_its_layout():
    model = build_model(preset("tiny", vocab_size=256, context=32))
    original = {name: p.detach().clone() for name, p in model.named_parameters()}
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    before = model(input_ids=ids).logits
    prepare_for_tensor_parallel(model)
    torch.testing.assert_close(model(input_ids=ids).logits, before, rtol=1e-5, atol=1e-5)
    assert type(model.transformer.h[0].attn.c_attn).__name__ == "SplitQKV"
    back = gpt2_layout(full_parameters(model))
    assert back.keys() == original.keys()
    assert all(torch.equal(back[name], original[name]) for name in original)


def _tiny_llama():
    return preset("llama-1b", n_layer=2, d_model=64, n_head=4, n_kv_head=2, d_ff=128,
                  vocab_size=256, context=32)


def _forward_backward_against_unsplit(family: str, sequence_parallel: bool):
    shape = preset("tiny", vocab_size=256, context=32) if family == "gpt2" else _tiny_llama()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    reference = build_model(shape)
    expected = reference(input_ids=ids, labels=ids)
    expected.loss.backward()
    mesh = device_mesh(Parallel(dp=1, tp=2))["tp"]
    model = apply_tensor_parallel(build_model(shape), mesh, sequence_parallel=sequence_parallel)
    with tp_module.CollectiveBytes() as comm:
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
    embedding = model.get_input_embeddings().weight  # whole on every rank, tied to the LM head
    norm = next(m for n, m in model.named_modules() if n.endswith("0.ln_1")
                or n.endswith("0.input_layernorm")).weight  # a DTensor under sequence parallel
    norm_grad = norm.grad.full_tensor() if isinstance(norm.grad, DTensor) else norm.grad
    reference_norm = next(m for n, m in reference.named_modules() if n.endswith("0.ln_1")
                          or n.endswith("0.input_layernorm")).weight
    return {
        "logits": (out.logits - expected.logits).abs().max().item(),
        "embedding grad": (embedding.grad - reference.get_input_embeddings().weight.grad)
        .abs().max().item(),
        "norm grad": (norm_grad - reference_norm.grad).abs().max().item(),
        "counts": {str(op).rsplit(".", 1)[-1]: n for op, n in comm.get_comm_counts().items()},
        "bytes": comm.bytes,
        "shape": model_shape(reference),
    }


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_parallelized_model_matches_and_all_reduces_four_activations_per_block(family):
    result = launch(_forward_backward_against_unsplit, nprocs=2, args=(family, False),
                    timeout_s=60)[0]
    assert max(result[k] for k in ("logits", "embedding grad", "norm grad")) < 1e-5, result
    shape = result["shape"]
    assert result["counts"] == {"all_reduce": 4 * shape.n_layer}  # 2 forward + 2 backward
    formula = tensor_parallel_bytes(2, 16, shape.d_model, shape.n_layer, tp=2)
    assert result["bytes"] == {"all_reduce": formula["all_reduce"]}
    assert formula["sent"] == formula["all_reduce"]  # a 2-rank ring sends 2 * 1/2 of it


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_sequence_parallel_turns_each_all_reduce_into_reduce_scatter_and_all_gather(family):
    result = launch(_forward_backward_against_unsplit, nprocs=2, args=(family, True),
                    timeout_s=60)[0]
    assert max(result[k] for k in ("logits", "embedding grad", "norm grad")) < 1e-5, result
    shape = result["shape"]
    # Per block, 4 all-gathers and 4 reduce-scatters; 2 more all-gathers where the slices
    # begin (the first block's input gradient) and end (the final norm's input).
    assert result["counts"] == {"reduce_scatter_tensor": 4 * shape.n_layer,
                                "all_gather_into_tensor": 4 * shape.n_layer + 2}
    whole = tensor_parallel_bytes(2, 16, shape.d_model, shape.n_layer, tp=2)["all_reduce"]
    one = whole // (4 * shape.n_layer)  # one activation, batch x seq x width, in bytes
    assert result["bytes"]["reduce_scatter_tensor"] == whole  # each takes a whole activation
    assert result["bytes"]["all_gather_into_tensor"] == (4 * shape.n_layer + 2) * one // 2


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="does not divide the model's 4 attention heads"):
        tp_module.check_tensor_parallel(model_shape(build_model(SMOKE_SHAPE)), 3)
    with pytest.raises(TypeError, match="no tensor-parallel plan"):
        tensor_parallel_plan(nn.Linear(2, 2))


def _forward_of_an_odd_length(family: str) -> str:
    shape = preset("tiny", vocab_size=256, context=32) if family == "gpt2" else _tiny_llama()
    model = apply_tensor_parallel(build_model(shape), device_mesh(Parallel(dp=1, tp=2))["tp"],
                                  sequence_parallel=True)
    with pytest.raises(ValueError) as error:
        model(torch.zeros(2, 15, dtype=torch.long))
    return str(error.value)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_sequence_parallel_refuses_a_length_the_ranks_do_not_divide_before_communicating(family):
    # Before, gloo's all-gather got slices of 8 and 7 positions and aborted the process.
    messages = launch(_forward_of_an_odd_length, nprocs=2, args=(family,), timeout_s=60)
    assert messages == ["sequence parallelism splits the 15 positions of each sequence over 2 "
                        "tensor-parallel ranks: use a sequence length that 2 divides (e.g. 14 "
                        "or 16), or sequence_parallel=False"] * 2
    with pytest.raises(LaunchError, match=r"(?s)rank \d raised.*ValueError: .* the 31 positions"):
        launch(partial(train_tensor_parallel, steps=1, seq=31, tp=2, sequence_parallel=True),
               nprocs=2, timeout_s=60)


def _local_weight_bytes():
    model = apply_tensor_parallel(build_model(SMOKE_SHAPE), device_mesh(Parallel(dp=1, tp=2))["tp"])
    return tp_module.local_parameter_bytes(model)


def test_each_rank_holds_half_of_every_block_matrix_and_all_of_the_rest():
    shape = SMOKE_SHAPE
    d, f = shape.d_model, shape.ff
    # Split: q, k, v, attention output, MLP in and out matrices, and the column-parallel biases.
    split = shape.n_layer * (4 * d * d + 2 * d * f + 3 * d + f)
    total = sum(p.numel() for p in build_model(shape).parameters())
    measured = launch(_local_weight_bytes, nprocs=2, timeout_s=60)
    assert measured == [4 * (total - split // 2)] * 2  # fp32
    # The memory planner also splits the embeddings (Megatron's vocabulary-parallel embedding
    # and LM head), which this plan keeps whole: it plans fewer bytes than these ranks hold.
    planned = estimate_memory(shape, TrainingSetup(dtype="fp32", tensor_parallel=2, gpus=2))
    assert planned.items["weights"] < measured[0]
