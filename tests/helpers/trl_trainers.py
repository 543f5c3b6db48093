"""TRL 1.16's DPO and GRPO trainers, with the `self` their loss methods read: tests/posttrain runs
TRL's own code (`DPOTrainer._compute_loss`, `compute_ref_log_probs`, `GRPOTrainer._compute_loss`)
on the inputs llmlab's losses get, without a dataset, a tokenizer or an Accelerator. Each
stand-in holds the attributes those methods read, set as the trainers set them from their
configs, for one process; a tiny GPT-2 with TRL's fused LM head stands in for the policy."""

import contextlib
from collections import defaultdict
from types import MethodType, SimpleNamespace

import pytest
import torch

trl_utils = pytest.importorskip("trl.trainer.utils")
from trl.trainer.dpo_trainer import DPOTrainer  # noqa: E402  (after the skip: TRL is optional)
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402

from llmlab.models import build_model, preset  # noqa: E402

VOCAB = 64


class OneProcess:
    """The Accelerator of one process: nothing to gather or reduce, no autocast."""

    device = torch.device("cpu")
    num_processes = 1
    is_main_process = True

    def gather(self, tensor):
        return tensor

    gather_for_metrics = gather

    def reduce(self, tensor, reduction="sum"):
        return tensor

    def autocast(self):
        return contextlib.nullcontext()


def tiny_model(seed: int, fused_outputs: tuple[str, ...] = ("log_probs",)):
    """Lab 03's tiny GPT-2 (a small vocabulary) with TRL's fused LM head added: called with
    `fused_lm_head=True` it returns TRL's per-token log-probs; without, its own logits."""
    model = build_model(preset("tiny", vocab_size=VOCAB), seed=seed).eval()  # eval: no dropout
    trl_utils.add_fused_lm_head(model, outputs=fused_outputs)
    return model


def _metrics():
    return {"train": defaultdict(list), "eval": defaultdict(list)}


def dpo_trainer(model, ref_model, beta: float, precompute_ref_logps: bool = False,
                sft_weight: float = 0.0):
    """A DPOTrainer's `self` with its config's defaults: the sigmoid loss, reverse KL, no length
    desensitisation, no weighting, no auxiliary loss; with `sft_weight`, loss_type ["sigmoid",
    "sft"] weighted [1, sft_weight]."""
    losses = (["sigmoid", "sft"], [1.0, sft_weight]) if sft_weight else (["sigmoid"], [1.0])
    return SimpleNamespace(
        model=model, ref_model=ref_model, beta=beta, precompute_ref_logps=precompute_ref_logps,
        loss_types=losses[0], loss_weights=losses[1], f_divergence_type="reverse_kl",
        ld_alpha=None, use_weighting=False, aux_loss_enabled=False, accelerator=OneProcess(),
        args=SimpleNamespace(gradient_checkpointing_kwargs=None), _metrics=_metrics(),
        _total_train_tokens=0, _tp_size=1,
    )


def trl_dpo_loss(stand_in, inputs: dict) -> torch.Tensor:
    return DPOTrainer._compute_loss(stand_in, stand_in.model, inputs, return_outputs=False)


def trl_sequence_logprobs(model, inputs: dict) -> torch.Tensor:
    """TRL's per-sequence log-probability of each completion (DPO's reference pass), in the
    order of the rows of `inputs` (the method splits them into halves: put back together)."""
    stand_in = SimpleNamespace(model=model, ref_model=model, ld_alpha=None,
                               accelerator=OneProcess(),
                               args=SimpleNamespace(gradient_checkpointing_kwargs=None))
    return torch.cat(DPOTrainer.compute_ref_log_probs(stand_in, model, inputs))


def grpo_trainer(model, beta: float, epsilon: float):
    """A GRPOTrainer's `self` with loss_type "grpo", token-level ratios, one symmetric clip
    range, no entropy masking or bonus, no off-policy mask, no vLLM, no accumulation."""
    stand_in = SimpleNamespace(
        model=model, beta=beta, epsilon_low=epsilon, epsilon_high=epsilon, loss_type="grpo",
        importance_sampling_level="token", top_entropy_quantile=1.0,
        off_policy_mask_threshold=None, use_vllm=False, aux_loss_enabled=False,
        _entropy_bonus_enabled=False, current_gradient_accumulation_steps=1,
        accelerator=OneProcess(), args=SimpleNamespace(use_bias_correction_kl=False, delta=None),
        _metrics=_metrics(),
    )
    # TRL's own scoring of the completions (the fused head over the completion positions).
    stand_in._get_per_token_logps_and_entropies = MethodType(
        GRPOTrainer._get_per_token_logps_and_entropies, stand_in)
    return stand_in


def trl_grpo_loss(stand_in, inputs: dict) -> torch.Tensor:
    return GRPOTrainer._compute_loss(stand_in, stand_in.model, inputs)
