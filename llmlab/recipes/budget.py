"""How long a training run is: its steps and tokens (exact) and its minutes, an estimate at a rate
measured on one GPU."""

from dataclasses import dataclass

from llmlab.gpu_specs import peak_tflops

# The rate the budget uses, measured: `llmlab train --profile full` (bf16, torch.compile) ran at
# 359,000 tokens/s on one H200 on 2026-11-28, 28% of its 989 TFLOP/s bf16 peak (gpu-check's
# training section gave 26-29%). An H100 has the same peak; `llmlab gpu-check` measures yours.
RATE_GPU, RATE_MFU = "H200", 0.28


@dataclass(frozen=True)
class TrainingBudget:
    """How long a run is: steps and tokens (exact), minutes (an estimate at a rate measured on
    one GPU)."""

    steps: int
    tokens: int
    tokens_per_s: float  # RATE_GPU's measured MFU, for this model's FLOPs per token

    @property
    def minutes(self) -> float:
        return self.tokens / self.tokens_per_s / 60

    def __str__(self) -> str:
        return (f"{self.steps:,} steps, {self.tokens / 1e6:,.1f}M tokens: about "
                f"{self.minutes:,.1f} minutes on one {RATE_GPU} at "
                f"~{self.tokens_per_s:,.0f} tokens/s ({RATE_MFU:.0%} MFU, as measured there); "
                "llmlab gpu-check measures your GPU's rate")


def training_budget(
    train_tokens: int, passes: float, tokens_per_step: int, flops_per_token: float
) -> TrainingBudget:
    """Steps for `passes` over `train_tokens`, and the minutes they would take at RATE_MFU of
    RATE_GPU's bf16 peak: tokens/s = MFU x peak FLOP/s / training FLOPs per token."""
    steps = int(passes * train_tokens) // tokens_per_step
    tokens_per_s = RATE_MFU * peak_tflops(RATE_GPU, "bf16") * 1e12 / flops_per_token
    return TrainingBudget(steps, steps * tokens_per_step, tokens_per_s)
