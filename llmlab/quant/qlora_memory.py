"""QLoRA's training memory, measured on a real step and set beside Lab 02's plan.

The plan is `llmlab.memory.estimate_memory` with `lora_rank` and `weights_4bit="nf4"`; the
measurement is `llmlab.memory.measure_training_step` (a tensor tracker, on any device; on a GPU
also the allocator's own peak) on a model made by `qlora_model`, with the same batch, dtype,
attention and optimizer.
"""

from dataclasses import dataclass

import torch

from llmlab.memory import (
    MeasuredStep,
    MemoryEstimate,
    TrainingSetup,
    estimate_memory,
    measure_training_step,
    optimizer_by_name,
    prepare,
)
from llmlab.models import ModelShape
from llmlab.quant.qlora import qlora_model, quant_state_bytes
from llmlab.tables import markdown_table
from llmlab.units import MB


@dataclass(frozen=True)
class QLoRAMemory:
    """One QLoRA training step: measured bytes beside the planned ones."""

    measured: MeasuredStep
    quant_state_bytes: int  # the NF4 scales, which the tracker cannot see: added to the weights
    planned: MemoryEstimate

    @property
    def measured_peak(self) -> int:
        """The tracker's peak plus the NF4 scales (alive the whole step)."""
        return self.measured.peak_bytes + self.quant_state_bytes

    @property
    def ratio(self) -> float:
        """Measured peak over planned peak: 1.0 is a perfect plan."""
        return self.measured_peak / self.planned.peak

    def rows(self) -> dict[str, tuple[float, float]]:
        """{what: (measured bytes, planned bytes)} for the weights, the adapters' gradients and
        optimizer states, what the forward pass keeps for backward, and the peak."""
        items, step = self.planned.items, self.measured
        return {
            "weights (NF4 blocks, rest, adapters)": (step.weights + self.quant_state_bytes,
                                                     items["weights"]),
            "adapter gradients": (step.gradients, items["gradients"]),
            "adapter optimizer states": (step.optimizer_states, items["optimizer states"]),
            "activations kept for backward": (step.activations, items["block activations"]
                                              + items["head activations"]),
            "peak": (self.measured_peak, self.planned.peak),
        }

    def table(self) -> str:
        """The rows as text, in MB (10^6 bytes), with measured / planned."""
        return markdown_table([
            {"": name, "measured MB": f"{measured / MB:.3f}", "planned MB": f"{planned / MB:.3f}",
             "ratio": f"{measured / planned:.3f}" if planned else "-"}
            for name, (measured, planned) in self.rows().items()], aligned=True)


def qlora_memory(
    model: str | ModelShape, setup: TrainingSetup, device: torch.device | str = "cpu"
) -> QLoRAMemory:
    """Build `model`, make it QLoRA (`setup.lora_rank`, NF4 blocks), measure one training step
    of `setup` after a warm-up step, and plan the same step with `estimate_memory`.

    llmlab.train's Trainer uses a fused AdamW: `fused_optimizer=True` measures what it runs.
    Dropout is off, as the plan assumes. fp32 and torch.autocast (dtype="bf16",
    fp32_grads=True) can be measured; under autocast the 4-bit layers return fp32 (the dtype of
    their input, which LayerNorm makes fp32), so the activations run above the plan's 16 bits.
    """
    if not setup.lora_rank or setup.weights_4bit != "nf4":
        raise ValueError(
            "qlora_memory measures QLoRA: give the setup lora_rank >= 1 and weights_4bit='nf4' "
            f"(got lora_rank={setup.lora_rank}, weights_4bit={setup.weights_4bit!r})"
        )
    if setup.dtype != "fp32" and not setup.mixed:
        raise ValueError(
            "peft keeps LoRA adapters in fp32 even on a 16-bit base (its autocast_adapter_dtype), "
            "which a pure 16-bit plan does not describe: measure dtype='fp32', or dtype='bf16' "
            "with fp32_grads=True (torch.autocast)"
        )
    # prepare() builds plain models (it refuses LoRA): build the base model, then convert it.
    plain = setup.replace(lora_rank=0, weights_4bit="")
    base, _, input_ids, autocast_dtype = prepare(model, plain, device)
    weights_dtype = next(base.parameters()).dtype
    peft_model = qlora_model(base, rank=setup.lora_rank, compute_dtype=weights_dtype)
    del base  # the copy inside peft_model is the one trained; let the original go
    adapters = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = optimizer_by_name(adapters, setup.optimizer, setup.fused_optimizer)
    measured = measure_training_step(peft_model, optimizer, input_ids, autocast_dtype)
    return QLoRAMemory(measured, quant_state_bytes(peft_model), estimate_memory(model, setup))
