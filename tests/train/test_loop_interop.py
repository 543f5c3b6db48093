"""A model trained by llmlab.train is an ordinary Hugging Face model: it saves, loads with
AutoModelForCausalLM and generates through pipeline("text-generation")."""

import torch
from helpers.train_fakes import (
    CONTEXT,
    VOCAB,
    RandomWindows,
    tiny_gpt2,
    tiny_tokenizer,
    token_stream,
)
from transformers import AutoModelForCausalLM, pipeline

from llmlab.train import TrainConfig, Trainer


def test_trained_model_round_trips_through_hugging_face_format(tmp_path):
    model = tiny_gpt2()
    settings = TrainConfig(max_steps=2, micro_batch_size=4, seq_len=CONTEXT, dtype="fp32",
                           device="cpu", eval_interval=100, progress=False)
    Trainer(model, settings, RandomWindows(token_stream(), 4)).fit()
    tokenizer = tiny_tokenizer()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    inputs = torch.randint(0, VOCAB, (1, 8))
    torch.testing.assert_close(loaded(inputs).logits, model.eval()(inputs).logits)
    generator = pipeline("text-generation", model=str(tmp_path), device="cpu")
    text = generator("def", max_new_tokens=5, do_sample=False)[0]["generated_text"]
    assert text.startswith("def") and len(text) > len("def")


def test_a_sample_is_seeded_text_that_leaves_the_training_rng_and_mode_alone():
    """Trainer.sample (Hugging Face's generate through llmlab.models.generation): the prompt and
    its continuation, the same for the same seed, and training goes on as if it never ran."""
    tokenizer = tiny_tokenizer()
    settings = TrainConfig(seq_len=CONTEXT, device="cpu", seed=3)
    trainer = Trainer(tiny_gpt2(), settings, RandomWindows(token_stream(), 4), tokenizer=tokenizer)
    trainer.model.train()
    state = torch.random.get_rng_state()
    text = trainer.sample("def", max_new_tokens=6)
    assert torch.equal(torch.random.get_rng_state(), state) and trainer.model.training
    prompt = tokenizer.decode(tokenizer("def").input_ids)
    assert text.startswith(prompt) and len(text) > len(prompt)
    assert text == trainer.sample("def", max_new_tokens=6)
