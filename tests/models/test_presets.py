"""Model presets build through transformers, train on the CPU, and refuse bad shapes with a clear
message."""

import dataclasses

import pytest
import torch

from llmlab import models
from llmlab.models import ModelShape


def test_tiny_model_trains_on_the_cpu():
    model = models.build_model("tiny")
    x = torch.randint(0, models.SMOKE_VOCAB, (2, 32))
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    assert torch.isfinite(loss) and model.transformer.wte.weight.grad is not None
    assert 7.1 < loss.item() < 8.1  # about ln(2048) = 7.62 for an untrained model


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="tiny, small, gpt2-124m"):
        models.preset("gpt5")


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"d_model": 250}, "not divisible by n_head"),
        ({"n_layer": 0}, "n_layer must be a positive integer"),
        ({"vocab_size": -5}, "vocab_size must be a positive integer"),
        ({"d_ff": -1}, "d_ff must be"),
        ({"family": "mamba"}, "unknown model family"),
        ({"n_kv_head": 2}, "no grouped-query attention"),
        ({"n_experts": 4, "top_k": 2}, "mixtures of experts are llama shapes"),
    ],
)
def test_bad_shapes_are_refused_with_a_clear_message(changes, words):
    with pytest.raises(ValueError, match=words):
        models.preset("tiny", **changes)


@pytest.mark.parametrize("experts, top_k", [(4, 0), (0, 2), (4, 5), (1, 1), (4, -1)])
def test_a_mixture_needs_two_or_more_experts_and_a_top_k_among_them(experts, top_k):
    with pytest.raises(ValueError, match="n_experts >= 2 and top_k from 1|must be a positive"):
        models.preset("llama-7b", n_experts=experts, top_k=top_k)


def test_llama_heads_must_be_a_multiple_of_the_kv_heads():
    with pytest.raises(ValueError, match="multiple of n_kv_head"):
        ModelShape("llama", 2, 256, 4, 1000, 128, n_kv_head=3)


def test_bad_attention_and_sequence_are_refused():
    with pytest.raises(ValueError, match="unknown attention"):
        models.build_model("tiny", device="meta", attention="flash")
    with pytest.raises(ValueError, match="seq must be"):
        models.training_flops_per_token("tiny", 0)
    with pytest.raises(ValueError, match="d_model must be"):
        models.LSTMLanguageModel(100, 0, 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_builds_on_the_gpu():
    model = models.build_model("tiny", device="cuda", dtype=torch.bfloat16)
    assert next(model.parameters()).device.type == "cuda"
    x = torch.randint(0, models.SMOKE_VOCAB, (2, 32), device="cuda")
    assert torch.isfinite(model(input_ids=x, labels=x).loss)


def test_activation_checkpointing_switches_on_under_either_transformers_name():
    model = models.build_model("tiny")
    models.enable_activation_checkpointing(model)
    assert model.is_gradient_checkpointing

    class OlderTransformersModel:  # transformers before 5.2x: only the old name exists
        called = False

        def gradient_checkpointing_enable(self):
            self.called = True

    older = OlderTransformersModel()
    models.enable_activation_checkpointing(older)
    assert older.called


@pytest.mark.parametrize("shape", [
    ModelShape("gpt2", 2, 64, 4, 256, 32, source="a test"),
    ModelShape("gpt2", 2, 64, 4, 256, 32, d_ff=96, tied_embeddings=False),
    ModelShape("llama", 2, 64, 4, 256, 32, d_ff=96, n_kv_head=2),
    ModelShape("llama", 2, 64, 4, 256, 32, d_ff=96, n_kv_head=2, n_experts=4, top_k=2),
], ids=["gpt2", "gpt2-untied-narrow-mlp", "llama-gqa", "mixtral"])
def test_model_shape_reads_back_the_shape_a_model_was_built_from(shape):
    built = models.build_model(shape, device="meta")
    read = models.model_shape(built)

    def spelled_out(s):  # d_ff 0 means 4 * d_model; source is a note no config holds
        return dataclasses.replace(s, d_ff=s.d_ff or 4 * s.d_model, source="")

    assert spelled_out(read) == spelled_out(shape)


def test_model_shape_refuses_a_model_of_another_kind():
    with pytest.raises(TypeError, match="no ModelShape for a 'Linear' model"):
        models.model_shape(torch.nn.Linear(2, 2))
