"""Saving: a pruned model reloads with from_pretrained, mask files round-trip, and damaged files
(checksums) or another model's masks are refused."""

import pytest
import torch
from helpers.model_files import pickle_the_weights
from helpers.pruning import GPT2, LLAMA, SHAPES, same_masks
from transformers import AutoModelForCausalLM

from llmlab.models import build_model
from llmlab.prune import (
    apply_masks,
    global_masks,
    load_masks,
    load_pruned,
    masked_weights,
    save_masks,
    save_pruned,
    sparsity_report,
)


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
                       "from the sha256 .*llmlab.prune.save_pruned$"):
        load_pruned(folder)


def test_a_pruned_model_with_pickled_weights_is_refused(tmp_path):
    model = build_model(GPT2).eval()
    folder = save_pruned(model, tmp_path / "pruned")
    pickle_the_weights(folder, model)  # from_pretrained alone would unpickle it
    with pytest.raises(ValueError, match=r"pruned model .*: .*no file named model.safetensors.* "
                       r"Only safetensors weights .*llmlab.prune.save_pruned$"):
        load_pruned(folder)


def test_a_damaged_mask_file_is_refused(tmp_path):
    masks = global_masks(build_model(GPT2), 0.5)
    path = save_masks(masks, tmp_path / "masks.safetensors")
    flip_byte(path, at=0.9)  # a 0/1 byte of a mask: one weight pruned or kept the other way
    with pytest.raises(ValueError, match="mask file .* is damaged: masks.safetensors differs "
                       "from the sha256 .*llmlab.prune.save_masks$"):
        load_masks(path, build_model(GPT2))
    (tmp_path / "masks.safetensors.sha256").unlink()
    with pytest.raises(ValueError, match="masks.safetensors.sha256 is missing"):
        load_masks(path, build_model(GPT2))


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
