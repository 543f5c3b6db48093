"""observe_inputs hands each watched layer's input over as (tokens, features), from the first
`window` tokens, computed in eval mode; it leaves the model as it found it (training mode, no
hooks), even when a batch is refused; token ids outside the vocabulary, float ids and NaN or inf
inputs are refused with the batch and the layer they are in. (Its callers: tests/quant/
test_calibrate.py, tests/prune/test_wanda.py.)"""

import pytest
import torch

from llmlab.models import ModelShape, build_model
from llmlab.models.observe import check_token_ids, observe_inputs

SHAPE = ModelShape("gpt2", 2, 32, 4, 64, 16)


def batches(count=2, rows=2, seq=12):
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(0, SHAPE.vocab_size, (rows, seq), generator=generator)
            for _ in range(count)]


def observed(model, names, data, window=None):
    seen = []
    modules = {name: model.get_submodule(name) for name in names}
    observe_inputs(model, modules, data, lambda name, x: seen.append((name, x.clone())), window)
    return seen


def test_each_layer_gets_its_input_in_eval_mode_cut_to_the_window():
    model = build_model(SHAPE)
    model.transformer.drop.p = 0.5  # dropout on the embeddings: only eval mode gives them whole
    data = batches()
    seen = observed(model, ["transformer.h.0.ln_1", "transformer.h.1.mlp.c_fc"], data, window=8)
    assert [name for name, _ in seen] == ["transformer.h.0.ln_1", "transformer.h.1.mlp.c_fc"] * 2
    assert [tuple(x.shape) for _, x in seen] == [(2 * 8, 32)] * 4  # (rows x window, width)
    for ids, (_, x) in zip(data, seen[::2], strict=True):
        embedded = model.transformer.wte(ids[:, :8]) + model.transformer.wpe(torch.arange(8))
        torch.testing.assert_close(x, embedded.reshape(-1, 32).detach())


def test_the_model_is_left_as_it_was_even_after_a_refusal():
    model = build_model(SHAPE).train()
    layer = model.transformer.h[0].ln_1
    bad = [batches(count=1)[0], torch.full((2, 12), SHAPE.vocab_size)]  # batch 1: id 64
    with pytest.raises(ValueError, match="calibration batch 1 holds token id 64"):
        observed(model, ["transformer.h.0.ln_1"], bad)
    assert model.training and not layer._forward_pre_hooks
    observed(model, ["transformer.h.0.ln_1"], batches())
    assert model.training and not layer._forward_pre_hooks


def test_a_nan_input_is_refused_with_the_layer_and_the_batch():
    model = build_model(SHAPE)
    data = batches()
    with torch.no_grad():  # a token of batch 1 only, so batch 0 goes through
        model.transformer.wte.weight[data[1][0, 3]] = torch.nan
    with pytest.raises(ValueError, match=r"the input of transformer.h.1.attn.c_attn on calibration "
                       r"batch 1 holds \d+ NaN or inf"):
        observed(model, ["transformer.h.1.attn.c_attn"], data)


@pytest.mark.parametrize("ids, message", [
    (torch.tensor([[0, 63, 64]]), r"batch 3 holds token id 64, outside this model's vocabulary "
                                  r"of 64 \(ids 0 to 63\)"),
    (torch.tensor([[5, -1, 2]]), "batch 3 holds token id -1"),
    (torch.tensor([[1.0, 2.0]]), "batch 3 holds torch.float32 values: token ids are integers"),
], ids=["beyond", "negative", "float"])
def test_token_ids_outside_the_vocabulary_or_not_integers_are_refused(ids, message):
    with pytest.raises(ValueError, match=message):
        check_token_ids(ids, 64, batch=3)
    check_token_ids(torch.tensor([[0, 63]]), 64, batch=3)  # both ends of the vocabulary pass
    check_token_ids(torch.zeros(0, 4, dtype=torch.long), 64, batch=3)  # an empty batch too
