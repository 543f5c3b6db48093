"""Keeping masks applied: pruned weights stay exactly zero through AdamW and the course trainer,
masking again only removes more, masks in any array form apply."""

import pytest
import torch
from helpers.pruning import GPT2, SHAPES

from llmlab.models import build_model
from llmlab.prune import (
    apply_masks,
    current_weight,
    global_masks,
    make_permanent,
    masked_weights,
    sparsity_report,
)
from llmlab.train import TrainConfig, Trainer
from llmlab.train.optim import build_optimizer


def adamw_steps(model, steps=5):
    """AdamW as the course trains (decoupled weight decay 0.1 on matrices, betas 0.9/0.95)."""
    optimizer = build_optimizer(model, TrainConfig(lr=1e-2, weight_decay=0.1))
    torch.manual_seed(0)
    for _ in range(steps):
        ids = torch.randint(0, GPT2.vocab_size, (4, 16))
        model(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return optimizer


def pruned_entries_are_zero(model, masks):
    return all((current_weight(model.get_submodule(n.rpartition(".")[0]))[~mask] == 0).all()
               for n, mask in masks.items())


@pytest.mark.parametrize("family", SHAPES)
def test_pruned_weights_stay_exactly_zero_through_adamw(family):
    model = build_model(SHAPES[family])
    masks = global_masks(model, 0.5)
    apply_masks(model, masks)
    optimizer = adamw_steps(model)
    assert pruned_entries_are_zero(model, masks)
    # Why they stay zero: a pruned entry's gradient through weight_orig * mask is exactly 0, so
    # AdamW's moments there stay 0 and only its decoupled decay touches weight_orig.
    for name, mask in masks.items():
        moments = optimizer.state[model.get_submodule(name.rpartition(".")[0]).weight_orig]
        assert not moments["exp_avg"][~mask].any() and not moments["exp_avg_sq"][~mask].any()
    make_permanent(model)
    assert masked_weights(model) == []
    assert pruned_entries_are_zero(model, masks)
    assert sparsity_report(model)[-1].sparsity == pytest.approx(0.5, abs=1e-4)


def test_zeroing_once_without_keeping_the_mask_does_not_survive_adamw():
    """What the test above guards against: their gradients move zeroed weights again."""
    model = build_model(GPT2)
    masks = global_masks(model, 0.5)
    with torch.no_grad():
        for name, mask in masks.items():
            model.get_parameter(name).mul_(mask)
    assert pruned_entries_are_zero(model, masks)
    adamw_steps(model)
    assert not pruned_entries_are_zero(model, masks)


class RandomTokens:
    """A batch source of random token windows (the Trainer's BatchSource protocol)."""

    def __init__(self, seed: int = 0):
        self.generator = torch.Generator().manual_seed(seed)

    def next_batch(self):
        ids = torch.randint(0, GPT2.vocab_size, (2, 17), generator=self.generator)
        return ids[:, :-1], ids[:, 1:]

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_recovery_training_with_the_course_trainer_keeps_the_zeros():
    model = build_model(GPT2)
    masks = global_masks(model, 0.5)
    apply_masks(model, masks)
    before = {n: current_weight(model.get_submodule(n.rpartition(".")[0])) for n in masks}
    config = TrainConfig(max_steps=5, micro_batch_size=2, seq_len=16, lr=1e-2, dtype="fp32",
                         device="cpu", eval_interval=5, eval_batches=1, progress=False)
    Trainer(model, config, RandomTokens(0), RandomTokens(1)).fit()
    assert pruned_entries_are_zero(model, masks)
    after = {n: current_weight(model.get_submodule(n.rpartition(".")[0])) for n in masks}
    assert all(not torch.equal(before[n], after[n]) for n in masks)  # the kept weights trained


def test_masking_again_only_removes_more():
    model = build_model(GPT2)
    first = global_masks(model, 0.3)
    apply_masks(model, first)
    apply_masks(model, global_masks(model, 0.6))
    report = sparsity_report(model)
    assert report[-1].sparsity == pytest.approx(0.6, abs=1e-4)
    assert pruned_entries_are_zero(model, first)


def test_masks_in_any_array_form_apply():
    """A numpy mask (or nested lists) is a mask too: a learner's exercise may return one."""
    model, reference = build_model(GPT2), build_model(GPT2)
    masks = global_masks(model, 0.5)
    apply_masks(model, {name: mask.numpy() for name, mask in masks.items()})
    apply_masks(reference, masks)
    assert all(torch.equal(current_weight(model.get_submodule(n.rpartition(".")[0])),
                           current_weight(reference.get_submodule(n.rpartition(".")[0])))
               for n in masks)
