"""Post-training quantization (RTN, GPTQ) against quantization-aware training (QAT) at the same
bits and group size, measured by perplexity on the same held-out windows. An experiment that
trains (QAT is training through fake quantization), so it lives with quantization, above the
trainer, not with the metrics below it."""

import copy
from collections.abc import Callable, Sequence

import torch

from llmlab.evaluate.next_token import perplexity
from llmlab.quant.model import quantize_model
from llmlab.quant.qat import finish_qat, prepare_qat
from llmlab.train import BatchSource, TrainConfig, Trainer


def fine_tuned(
    model: torch.nn.Module, config: TrainConfig, batches: BatchSource
) -> torch.nn.Module:
    """The model after `config.max_steps` steps of llmlab.train's loop (the model itself)."""
    Trainer(model, config, batches).fit()
    return model.eval()


def qat_variants(
    model: torch.nn.Module,
    make_batches: Callable[[], BatchSource],
    calibration: Sequence[torch.Tensor],
    config: TrainConfig,
    *,
    bits: Sequence[int] = (4,),
    group_size: int = 128,
) -> dict[str, torch.nn.Module]:
    """Copies of the trained `model` (left untouched), each given the same training budget:

    - "float": as it is; "float tuned": fine-tuned `config.max_steps` more steps in float;
    - for each width b of `bits`, "rtn-b" and "gptq-b": the tuned model quantized after training
      (GPTQ calibrated on the token-id batches `calibration`), so every quantized variant had
      the same training budget and QAT's gain is not mistaken for what the extra steps alone buy;
    - "qat-b": fine-tuned as many steps through fake quantization, then rounded for good.

    `make_batches()` returns a fresh training batch source; it is called once per fine-tune, so
    every fine-tune sees the same batches. The float fine-tune is done once and serves every width.
    """
    tuned = fine_tuned(copy.deepcopy(model), config, make_batches())
    variants = {"float": model, "float tuned": tuned}
    for width in bits:
        for method in ("rtn", "gptq"):
            variants[f"{method}-{width}"] = copy.deepcopy(tuned)
            quantize_model(variants[f"{method}-{width}"], method, calibration, width, group_size,
                           progress=config.progress)
        qat = copy.deepcopy(model)
        prepare_qat(qat, width, group_size)
        variants[f"qat-{width}"] = fine_tuned(qat, config, make_batches())
        finish_qat(qat)
    return variants


def ptq_against_qat(
    model: torch.nn.Module,
    make_batches: Callable[[], BatchSource],
    windows: Sequence[torch.Tensor],
    calibration: Sequence[torch.Tensor],
    config: TrainConfig,
    *,
    bits: Sequence[int] = (4,),
    group_size: int = 128,
    batch_size: int = 8,
) -> dict[str, float]:
    """Perplexity on `windows` of each of `qat_variants`."""
    variants = qat_variants(model, make_batches, calibration, config, bits=bits,
                            group_size=group_size)
    return {name: perplexity(variant, windows, batch_size) for name, variant in variants.items()}
