"""DDP, ZeRO-1 and FSDP2 on 2 gloo ranks train exactly like one process on the same global batch,
and stop doing so when their communication is removed (so the check can fail). (The harness in one
process, and the arguments it refuses: tests/distributed/harness/test_equivalence.py.)"""

import pytest
import torch

from llmlab.distributed import LaunchError, launch
from llmlab.distributed.data_parallel import (
    make_optimizer,
    register_comm_hook,
    split_batch,
    wrap_model,
)
from llmlab.distributed.harness.equivalence import compare_to_single_process


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "zero1", "fsdp"])
def test_strategy_matches_one_process(strategy):
    """Invariant: the mean of per-rank mean gradients is the global-batch gradient, so after 5
    steps the parameters agree to the target tolerance (DDP 1e-6, sharded 1e-5, relative)."""
    result = compare_to_single_process(strategy, nprocs=2, steps=5)
    assert result.max_rel_error <= result.target, result
    # The bytes counted on the wrapped collectives match the strategy's formula (target: within 5%).
    assert result.bytes_sent_per_rank == pytest.approx(result.bytes_formula, rel=0.05), result


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "drop"),
    [("ddp", "all_reduce"), ("zero1", "all_reduce"), ("zero1", "broadcast"),
     ("fsdp", "reduce_scatter")],
)
def test_check_fails_without_the_communication(strategy, drop):
    """The same check, with the strategy's gradient averaging (or ZeRO-1's parameter broadcast)
    removed: each rank trains on its half alone and the parameters drift far from one process."""
    result = compare_to_single_process(strategy, nprocs=2, steps=5, drop=drop)
    assert result.max_rel_error > 100 * result.target, result


def test_split_batch_slices_and_refuses_uneven_batches():
    assert [split_batch(6, r, 3) for r in range(3)] == [slice(0, 2), slice(2, 4), slice(4, 6)]
    with pytest.raises(ValueError, match="multiple of 4"):
        split_batch(6, 0, 4)
    with pytest.raises(ValueError, match="outside"):
        split_batch(4, 2, 2)


def test_bad_input_is_named():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="ddp, zero1, fsdp"):
        wrap_model(model, "zero4")
    for strategy in ("fsdp", "zero1", "ddp"):
        with pytest.raises(RuntimeError, match="needs a process group"):
            wrap_model(model, strategy)
    with pytest.raises(RuntimeError, match="needs a process group"):
        make_optimizer(model, "zero1", lr=0.1)
    with pytest.raises(TypeError, match="belong to DDP"):
        register_comm_hook(model, "fp16")


def _hooked_step(kind):
    import torch.distributed as dist

    from llmlab.distributed.harness.comm import count_collectives

    torch.manual_seed(0)
    model = wrap_model(torch.nn.Linear(64, 64), "ddp")
    options = {"start_powerSGD_iter": 2} if kind == "powersgd" else {}
    register_comm_hook(model, kind, **options)
    sent = []
    for _ in range(3):  # PowerSGD compresses from its 2nd iteration on
        with count_collectives() as counter:
            model(torch.randn(4, 64) + dist.get_rank()).sum().backward()
        sent.append(counter.sent_bytes)
    return sent[-1]


def test_compression_hooks_send_fewer_bytes():
    """fp16 compression halves the bytes of the all-reduce; rank-1 PowerSGD sends far fewer."""
    kinds = ("allreduce", "fp16", "powersgd")
    sent = {kind: launch(_hooked_step, 2, args=(kind,))[0] for kind in kinds}
    assert sent["allreduce"] == 2 * (2 - 1) / 2 * (64 * 64 + 64) * 4
    assert sent["fp16"] == sent["allreduce"] / 2
    assert sent["powersgd"] < sent["allreduce"] / 4


def _bf16_on_gloo():
    register_comm_hook(wrap_model(torch.nn.Linear(2, 2), "ddp"), "bf16")


def test_bf16_compression_on_gloo_says_it_needs_nccl():
    with pytest.raises(LaunchError, match="CUDA feature"):
        launch(_bf16_on_gloo, 2)


@pytest.mark.slow
def test_compressed_gradients_send_less_and_drift_a_little():
    """fp16 halves DDP's bytes and costs accuracy (no longer within 1e-6); rank-1 PowerSGD sends
    about 1% of them, over several buckets (gloo needs them in one order on every rank)."""
    fp16 = compare_to_single_process("ddp", comm_hook="fp16")
    assert fp16.bytes_sent_per_rank == fp16.bytes_formula / 2
    assert fp16.target < fp16.max_rel_error < 1e-2
    powersgd = compare_to_single_process("ddp", comm_hook="powersgd")
    assert powersgd.bytes_sent_per_rank < powersgd.bytes_formula / 50
    assert powersgd.max_rel_error < 0.1
