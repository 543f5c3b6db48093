"""llmlab.prune on tiny random GPT-2 and Llama models: masks identical to torch.nn.utils.prune
(ties and tensors of different sizes included), masks that survive AdamW, the cubic schedule,
reports, saving (with checksums: a damaged mask file or model folder is refused), and the errors
for bad input (NaN weights included)."""

import math

import pytest
import torch
from helpers.tiny_shapes import GPT2, LLAMA, SHAPES
from torch.nn.utils import prune as torch_prune
from transformers import AutoModelForCausalLM

from llmlab.models import build_model
from llmlab.prune import (
    apply_masks,
    check_sparsity,
    cubic_sparsity,
    current_weight,
    global_masks,
    layerwise_masks,
    load_masks,
    load_pruned,
    make_permanent,
    mask_sparsity,
    masked_weights,
    nm_mask,
    nm_masks,
    prunable_weights,
    pruning_steps,
    save_masks,
    save_pruned,
    sparsity_report,
    sparsity_table,
)
from llmlab.train import TrainConfig, Trainer
from llmlab.train.optim import build_optimizer


def with_ties(model):
    """Round every weight to a coarse grid: thousands of equal magnitudes at any threshold."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.round(parameter * 20) / 20)
    return model


def library_masks(model, sparsity):
    """torch.nn.utils.prune's global L1 pruning of the same matrices, in the same order."""
    modules = prunable_weights(model)
    torch_prune.global_unstructured([(m, "weight") for m in modules.values()],
                                    torch_prune.L1Unstructured, amount=sparsity)  # fmt: skip
    return {name: module.weight_mask.bool() for name, module in modules.items()}


def threshold_masks(model, sparsity):
    """A plausible mistake: keep |w| above the k-th smallest, which drops every tie at it."""
    weights = {n: m.weight.detach() for n, m in prunable_weights(model).items()}
    flat = torch.cat([w.abs().flatten() for w in weights.values()])
    threshold = torch.kthvalue(flat, round(sparsity * flat.numel())).values
    return {name: w.abs() > threshold for name, w in weights.items()}


def same_masks(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("family", SHAPES)
@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.5, 0.9])
def test_global_masks_equal_torch_global_unstructured(family, sparsity):
    for seed in range(2):
        model = with_ties(build_model(SHAPES[family], seed=seed))
        sizes = {module.weight.numel() for module in prunable_weights(model).values()}
        assert len(sizes) > 1  # tensors of different sizes share one ranking
        ours = global_masks(model, sparsity)
        assert same_masks(ours, library_masks(model, sparsity))
        assert mask_sparsity(ours) == pytest.approx(sparsity, abs=1e-4)


def test_the_mask_comparison_catches_a_plain_threshold():
    model = with_ties(build_model(GPT2))
    assert not same_masks(threshold_masks(model, 0.5), library_masks(model, 0.5))


@pytest.mark.parametrize("family", SHAPES)
def test_layerwise_masks_equal_torch_l1_unstructured(family):
    model = with_ties(build_model(SHAPES[family]))
    ours = layerwise_masks(model, 0.6)
    for name, module in prunable_weights(model).items():
        torch_prune.l1_unstructured(module, "weight", amount=0.6)
        assert torch.equal(ours[name], module.weight_mask.bool()), name
        assert 1 - ours[name].float().mean().item() == pytest.approx(0.6, abs=1e-3)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, math.nan])
def test_sparsity_outside_zero_to_one_is_refused(bad):
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        check_sparsity(bad)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        global_masks(build_model(GPT2), bad)


@pytest.mark.parametrize("bad", ["0.5", True, None])
def test_sparsity_must_be_a_number(bad):
    with pytest.raises(TypeError):
        check_sparsity(bad)


def test_nm_mask_keeps_the_n_largest_of_every_m_along_the_input():
    torch.manual_seed(0)
    weight = torch.randn(6, 8)
    mask = nm_mask(weight, 2, 4)
    assert torch.equal(mask.view(6, 2, 4).sum(-1), torch.full((6, 2), 2))
    kept = weight.abs()[mask].view(6, 2, 2).min(-1).values
    dropped = weight.abs()[~mask].view(6, 2, 2).max(-1).values
    assert (kept >= dropped).all()  # the two kept are the group's two largest


@pytest.mark.parametrize("family", SHAPES)
def test_nm_masks_group_along_each_layers_input_features(family):
    model = build_model(SHAPES[family])
    masks = nm_masks(model, 2, 4)
    assert mask_sparsity(masks) == 0.5
    for mask in masks.values():
        # GPT-2's Conv1D holds (in, out); Llama's Linear (out, in): groups run along "in".
        groups = mask.T if family == "gpt2" else mask
        assert torch.equal(groups.reshape(-1, 4).sum(-1), torch.full((mask.numel() // 4,), 2))


def test_nm_refuses_a_dimension_not_divisible_by_m_and_bad_n():
    with pytest.raises(ValueError, match="6 is not divisible by 4"):
        nm_mask(torch.randn(4, 6), 2, 4)
    with pytest.raises(ValueError, match="0 < n < m"):
        nm_mask(torch.randn(4, 8), 4, 4)
    odd = build_model(GPT2.replace(d_ff=66))  # the MLP's hidden width is not a multiple of 4
    with pytest.raises(ValueError, match="mlp.c_proj.weight: .*66 is not divisible by 4"):
        nm_masks(odd)


def test_tied_embeddings_are_refused_and_the_error_says_what_would_be_pruned():
    model = build_model(GPT2)  # the LM head shares the token embedding
    assert model.lm_head.weight is model.transformer.wte.weight
    with pytest.raises(ValueError, match="ties its LM head to the token embedding"):
        global_masks(model, 0.5, names=["lm_head.weight"])
    with pytest.raises(ValueError, match="input embedding and in the output layer"):
        prunable_weights(model, include_embeddings=True)
    wte = {"transformer.wte.weight": torch.ones_like(model.transformer.wte.weight)}
    with pytest.raises(ValueError, match="ties its LM head"):
        apply_masks(model, wte)
    untied = build_model(LLAMA)  # its own LM head: both may be pruned
    names = prunable_weights(untied, include_embeddings=True)
    assert {"model.embed_tokens.weight", "lm_head.weight"} <= set(names)


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
               for n, mask in masks.items())  # fmt: skip


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


def test_cubic_schedule_follows_zhu_and_gupta():
    kwargs = dict(final_sparsity=0.8, start_step=100, end_step=200, initial_sparsity=0.1)
    assert cubic_sparsity(50, **kwargs) == 0.0  # dense before pruning starts
    assert cubic_sparsity(100, **kwargs) == pytest.approx(0.1)
    assert cubic_sparsity(150, **kwargs) == pytest.approx(0.8 - 0.7 * 0.5**3)
    assert cubic_sparsity(200, **kwargs) == cubic_sparsity(999, **kwargs) == 0.8
    curve = [cubic_sparsity(step, **kwargs, every=10) for step in range(100, 201)]
    assert curve == sorted(curve)
    assert curve[10:20] == [curve[10]] * 10  # held between pruning steps
    assert pruning_steps(100, 200, every=30) == [100, 130, 160, 190, 200]
    # Fast first: the first tenth of the steps does more than a tenth of the work.
    assert cubic_sparsity(110, **kwargs) - 0.1 > 0.2 * (0.8 - 0.1)


@pytest.mark.parametrize("kwargs", [dict(final_sparsity=1.0, start_step=0, end_step=10),
                                    dict(final_sparsity=0.5, start_step=10, end_step=10),
                                    dict(final_sparsity=0.2, start_step=0, end_step=10,
                                         initial_sparsity=0.5),
                                    dict(final_sparsity=0.5, start_step=0, end_step=10, every=0)])
def test_cubic_schedule_refuses_bad_settings(kwargs):
    with pytest.raises(ValueError):
        cubic_sparsity(5, **kwargs)


def test_sparsity_report_per_layer_and_global():
    model = build_model(GPT2)
    masks = layerwise_masks(model, 0.25)
    masks["transformer.h.0.mlp.c_fc.weight"] = global_masks(
        model, 0.75, names=["transformer.h.0.mlp.c_fc.weight"])["transformer.h.0.mlp.c_fc.weight"]
    apply_masks(model, masks)
    rows = {row.tensor: row for row in sparsity_report(model)}
    assert rows["transformer.h.0.mlp.c_fc.weight"].sparsity == 0.75
    assert rows["transformer.h.1.attn.c_attn.weight"].sparsity == 0.25
    total = rows.pop("global")
    assert total.zeros == sum(row.zeros for row in rows.values())
    assert total.sparsity == pytest.approx(mask_sparsity(masks))
    assert "| 75.0%" in sparsity_table(sparsity_report(model))


@pytest.mark.parametrize("family", SHAPES)
def test_a_saved_pruned_model_reloads_with_from_pretrained(tmp_path, family):
    model = build_model(SHAPES[family]).eval()
    apply_masks(model, global_masks(model, 0.5))
    folder = save_pruned(model, tmp_path / "pruned")
    assert masked_weights(model)  # the model in memory keeps its masks
    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert not any(name.endswith("_orig") for name, _ in loaded.named_parameters())
    ids = torch.randint(0, GPT2.vocab_size, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
        torch.testing.assert_close(load_pruned(folder).eval()(ids).logits, model(ids).logits)
    assert sparsity_report(loaded)[-1].sparsity == pytest.approx(0.5, abs=1e-4)
    assert [p.name for p in tmp_path.iterdir()] == ["pruned"]  # no temporary left behind


def flip_byte(path, at=0.5):
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x01  # in the tensors' bytes (the header is a small start)
    path.write_bytes(data)


def test_a_damaged_pruned_model_is_refused(tmp_path):
    model = build_model(GPT2).eval()
    apply_masks(model, global_masks(model, 0.5))
    folder = save_pruned(model, tmp_path / "pruned")
    flip_byte(folder / "model.safetensors")
    with pytest.raises(ValueError, match="pruned model .* is damaged: model.safetensors differs "
                       "from the sha256 .*llmlab.prune.save_pruned$"):  # fmt: skip
        load_pruned(folder)


def test_a_damaged_mask_file_is_refused(tmp_path):
    masks = global_masks(build_model(GPT2), 0.5)
    path = save_masks(masks, tmp_path / "masks.safetensors")
    flip_byte(path, at=0.9)  # a 0/1 byte of a mask: one weight pruned or kept the other way
    with pytest.raises(ValueError, match="mask file .* is damaged: masks.safetensors differs "
                       "from the sha256 .*llmlab.prune.save_masks$"):  # fmt: skip
        load_masks(path, build_model(GPT2))
    (tmp_path / "masks.safetensors.sha256").unlink()
    with pytest.raises(ValueError, match="masks.safetensors.sha256 is missing"):
        load_masks(path, build_model(GPT2))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_magnitude_masks_refuse_a_non_finite_weight_by_name(bad):
    model = build_model(GPT2)
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[3, 5] = bad
    for masks in (layerwise_masks, global_masks):
        with pytest.raises(ValueError, match=r"transformer.h.1.mlp.c_fc.weight holds 1 NaN or "
                           r"inf value\(s\), the first at index \(3, 5\)"):  # fmt: skip
            masks(model, 0.5)


def test_masks_in_any_array_form_apply():
    """A numpy mask (or nested lists) is a mask too: a learner's exercise may return one."""
    model, reference = build_model(GPT2), build_model(GPT2)
    masks = global_masks(model, 0.5)
    apply_masks(model, {name: mask.numpy() for name, mask in masks.items()})
    apply_masks(reference, masks)
    assert all(torch.equal(current_weight(model.get_submodule(n.rpartition(".")[0])),
                           current_weight(reference.get_submodule(n.rpartition(".")[0])))
               for n in masks)  # fmt: skip


def test_mask_files_round_trip_and_refuse_another_model(tmp_path):
    model = build_model(GPT2)
    masks = global_masks(model, 0.5)
    path = save_masks(masks, tmp_path / "masks.safetensors")
    assert same_masks(load_masks(path, build_model(GPT2, seed=1)), masks)
    with pytest.raises(ValueError, match="masks.safetensors: the mask for .* is \\(64, 192\\)"):
        load_masks(path, build_model(GPT2.replace(d_model=32)))
    with pytest.raises(ValueError, match="names no weight of this LlamaForCausalLM"):
        load_masks(path, build_model(LLAMA))
    target = build_model(GPT2.replace(d_model=32))
    with pytest.raises(ValueError, match="another model"):
        apply_masks(target, masks)
    assert masked_weights(target) == []  # checked before any mask was applied
