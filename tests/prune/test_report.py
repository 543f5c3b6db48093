"""The sparsity report, per layer and global."""

import pytest
from helpers.pruning import GPT2

from llmlab.models import build_model
from llmlab.prune import (
    apply_masks,
    global_masks,
    layerwise_masks,
    mask_sparsity,
    sparsity_report,
    sparsity_table,
)


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
