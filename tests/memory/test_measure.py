"""Predicted against measured: a real training step on the CPU (tiny and small presets), and the
tracker against PyTorch's own MemTracker."""

import dataclasses

import pytest
import torch
from helpers.memory_items import activations

from llmlab import memory
from llmlab.memory import TrainingSetup, estimate_memory
from llmlab.models import build_model, preset
from llmlab.train import TrainConfig
from llmlab.train.optim import build_optimizer, newton_schulz_dtype
from llmlab.units import MB

# fp32 on the CPU, eager attention: the formula's textbook case.
CPU_STEP = TrainingSetup(batch=4, seq=256, dtype="fp32", optimizer="adamw", attention="eager")


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_predicted_matches_measured_on_the_cpu(name):
    measured = memory.measure(name, CPU_STEP)
    predicted = estimate_memory(name, CPU_STEP)
    # Model states are exact (AdamW also keeps a 4-byte step counter per tensor: < 1 KB).
    assert measured.weights == predicted.items["weights"]
    assert measured.gradients == predicted.items["gradients"]
    assert measured.optimizer_states == pytest.approx(predicted.items["optimizer states"], abs=1024)
    # The bound is 10%; eager attention in fp32 is within 0.1%.
    assert measured.activations == pytest.approx(activations(predicted), rel=0.10)
    assert measured.peak_bytes == pytest.approx(predicted.peak, rel=0.10)
    assert measured.peak_phase == "backward" and predicted.peak_phase == "start of backward"


@pytest.mark.parametrize(
    "changes",
    [{"attention": "sdpa"}, {"checkpointing": True}, {"optimizer": "sgd-momentum"}],
    ids=["fused-attention", "checkpointing", "sgd-momentum"],
)
def test_other_setups_are_predicted_within_10_percent(changes):
    setup = CPU_STEP.replace(**changes)
    measured = memory.measure("tiny", setup)
    predicted = estimate_memory("tiny", setup)
    assert measured.peak_bytes == pytest.approx(predicted.peak, rel=0.10)
    if changes.get("attention") == "sdpa":
        # The fused kernel saves copies of GPT-2's strided q and v (2 d per token per layer),
        # which the plan counts: 8% of the activations at 8192 tokens, 11% at 2048.
        assert measured.activations == pytest.approx(activations(predicted), rel=0.01)


SMALL_LLAMA = dataclasses.replace(preset("llama-1b"), n_layer=2, d_model=256, n_head=4,
                                  n_kv_head=2, d_ff=688, vocab_size=2048, context=256)


@pytest.mark.parametrize("model", ["tiny", SMALL_LLAMA], ids=["gpt2", "llama"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["", "checkpointing"])
def test_autocast_keeps_an_fp32_residual_stream_and_a_16_bit_input_per_matmul(model,
                                                                              checkpointing):
    """Under torch.autocast the blocks' stream stays fp32, so its norms (and a checkpointed
    block's input) keep 4 bytes per number, and each matmul casts its own 16-bit copy of its
    input (Llama's q, k and v three of the same one). Counted at 2 bytes and one copy, the plan
    fell 7-13% short of these activations."""
    setup = CPU_STEP.replace(dtype="bf16", fp32_grads=True, attention="sdpa",
                             checkpointing=checkpointing)
    measured, predicted = memory.measure(model, setup), estimate_memory(model, setup)
    # the tracker files autocast's 16-bit weight copies with the activations; checkpointing
    # drops the blocks' copies, not the head's (Llama's rotary tables, unplanned, add 1% here)
    copies = predicted.items["head weight copy" if checkpointing else "16-bit weight copies"]
    assert measured.after_forward["activations"] == pytest.approx(activations(predicted)
                                                                  + copies, rel=0.02)
    assert measured.peak_bytes == pytest.approx(predicted.peak, rel=0.06)


SMALL_MOE = preset("mixtral-8x7b").replace(n_layer=2, d_model=256, n_head=4, n_kv_head=2,
                                           d_ff=344, vocab_size=2048, context=256, source="")


@pytest.mark.parametrize("top_k", [1, 2])
def test_a_mixture_of_experts_is_predicted_within_2_percent(top_k):
    """transformers' Mixtral block on the CPU, fp32: the router's probabilities and, for each of
    the top_k experts a token goes to, its copy, SwiGLU's four tensors and the expert's output.
    Measured 0.6% above the plan (the rotary tables and the routing indices are not planned)."""
    setup = CPU_STEP.replace(attention="sdpa")
    shape = SMALL_MOE.replace(top_k=top_k)
    measured, predicted = memory.measure(shape, setup), estimate_memory(shape, setup)
    assert measured.optimizer_states == pytest.approx(predicted.items["optimizer states"],
                                                      abs=1024)
    assert measured.activations == pytest.approx(activations(predicted), rel=0.02)
    assert measured.peak_bytes == pytest.approx(predicted.peak, rel=0.02)


def measure_muon(model, setup: TrainingSetup):
    """A real step of the trainer's Muon (with its fused AdamW) on `model` built as `setup` says."""
    built = build_model(model, attention=setup.attention)
    optimizer = build_optimizer(built, TrainConfig(optimizer="muon"))
    input_ids = torch.randint(0, built.config.vocab_size, (setup.batch, setup.seq))
    return memory.measure_training_step(built, optimizer, input_ids)


# torch's Muon where this CPU has bf16 instructions, FP32Muon where it emulates them (the trainer's
# choice): their iterations hold different temporaries.
MUON_STEP = CPU_STEP.replace(optimizer="muon", fused_optimizer=True,
                             newton_schulz_dtype=newton_schulz_dtype("cpu"))


def test_muons_states_and_peak_are_predicted_on_the_cpu():
    measured, predicted = measure_muon("tiny", MUON_STEP), estimate_memory("tiny", MUON_STEP)
    # Muon's momentum on the blocks' matrices, AdamW's two moments (and step counts) on the rest
    assert measured.optimizer_states == pytest.approx(predicted.items["optimizer states"], abs=1024)
    assert measured.peak_bytes == pytest.approx(predicted.peak, rel=0.10)


def test_muons_temporaries_are_predicted_where_its_step_is_the_peak():
    """With 64 tokens in the vocabulary and 8 in the batch, the optimizer step is the peak: the
    largest matrix's update, two bf16 iterates and two Gram matrices on top of the states."""
    shape = preset("tiny", vocab_size=64, context=32)
    setup = MUON_STEP.replace(batch=1, seq=8)
    measured, predicted = measure_muon(shape, setup), estimate_memory(shape, setup)
    assert measured.peak_phase == "optimizer" and predicted.peak_phase == "optimizer step"
    assert measured.peak["temporaries"] == predicted.items["optimizer scratch"]
    assert measured.peak_bytes == pytest.approx(predicted.peak, abs=1024)


def test_the_tracker_agrees_with_torch_memtracker():
    from torch.distributed._tools.mem_tracker import MemTracker

    model = build_model("tiny", attention="eager")
    optimizer = memory.optimizer_by_name(model.parameters(), "adamw")
    input_ids = torch.randint(0, model.config.vocab_size, (2, 128))
    memory.training_step(model, optimizer, input_ids)  # create the optimizer's state
    with memory.MemoryTracker(model, optimizer) as ours:
        memory.training_step(model, optimizer, input_ids, tracker=ours)
    theirs = MemTracker()
    theirs.track_external(model, optimizer, input_ids)
    with theirs:
        memory.training_step(model, optimizer, input_ids)
    their_peak = next(iter(theirs.get_tracker_snapshot("peak").values()))["Total"]
    assert sum(ours.peak.values()) == their_peak


def test_measurement_refuses_what_plain_pytorch_cannot_run():
    with pytest.raises(ValueError, match="one device without ZeRO or LoRA"):
        memory.dry_run("tiny", zero=3, gpus=8)
    with pytest.raises(ValueError, match="DeepSpeed and Megatron"):
        memory.dry_run("tiny", dtype="bf16")  # 16-bit weights with a separate fp32 master
    with pytest.raises(ValueError, match="fake tensors"):
        memory.dry_run("tiny", dtype="fp32", optimizer="adam-8bit")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_allocator_peak_agrees_with_the_tracker():
    """The allocator rounds every block up to 512 bytes, and cuBLAS keeps workspaces that are no
    tensors: a fixed amount above the tensor bytes the tracker counts, not a share of them (on
    an H200: 70 MB for GPT-2 small's 11.9 GB step, at most 79 MB for this 0.36 GB one)."""
    first = memory.measure("small", CPU_STEP, device="cuda")  # its model is left for the collector
    measured = memory.measure("small", CPU_STEP, device="cuda")
    assert 0 <= measured.cuda_max_allocated - measured.peak_bytes <= 100 * MB
    # the first model's weights and optimizer states would add to this peak if left uncollected
    assert measured.cuda_max_allocated == pytest.approx(first.cuda_max_allocated, rel=0.02)
    assert measured.peak_bytes == pytest.approx(estimate_memory("small", CPU_STEP).peak, rel=0.10)

