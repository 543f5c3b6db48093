"""llmlab.evaluate on tiny random models: each score agrees with a reference, and the plausible
mistakes (mean of window means, an off-by-one target, transposed references) are caught."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from llmlab.data.tokenization import train_bpe
from llmlab.evaluate import (
    bleu,
    check_plain,
    chrf,
    compare_variants,
    comparison_table,
    generate_samples,
    held_out_windows,
    next_token_accuracy,
    samples_table,
    score_tokens,
    size_on_disk,
)
from llmlab.models import build_model, preset
from llmlab.prune import apply_masks, global_masks, make_permanent

TINY = preset("tiny", vocab_size=320, context=64, n_layer=2, d_model=64, n_head=2)
ATOL = 1e-5  # float32 sums over a few hundred tokens


def test_windows_predict_every_held_out_token_once():
    ids = torch.arange(100)
    windows = held_out_windows(ids, seq_len=32)
    assert [w.numel() for w in windows] == [33, 33, 33, 4]  # a short tail, not dropped
    targets = torch.cat([w[1:] for w in windows])
    assert torch.equal(targets, ids[1:])  # each token after the first predicted exactly once
    assert len(held_out_windows(ids, 32, max_windows=2)) == 2


@pytest.mark.parametrize("call", [lambda: held_out_windows(torch.arange(10), 0),
                                  lambda: held_out_windows([5], 4),
                                  lambda: held_out_windows(torch.arange(10), 4, max_windows=0)])
def test_windows_refuse_bad_input(call):
    with pytest.raises(ValueError):
        call()


def transformers_loss(model, windows):
    """The model's own loss (transformers shifts the labels itself), weighted by tokens."""
    model.eval()
    with torch.no_grad():
        losses = [(model(w[None], labels=w[None]).loss.item(), w.numel() - 1) for w in windows]
    return sum(loss * n for loss, n in losses) / sum(n for _, n in losses)


def mean_of_window_means(model, windows):
    """A plausible mistake: every window weighs the same, whatever its length."""
    model.eval()
    with torch.no_grad():
        return sum(model(w[None], labels=w[None]).loss.item() for w in windows) / len(windows)


@pytest.fixture(scope="module")
def model():
    return build_model(TINY, seed=0)


@pytest.fixture(scope="module")
def uneven_windows():
    torch.manual_seed(0)
    return held_out_windows(torch.randint(0, TINY.vocab_size, (200,)), seq_len=48)  # 48x4 + 7


def test_loss_agrees_with_transformers_on_one_window(model, uneven_windows):
    window = uneven_windows[:1]
    assert score_tokens(model, window).loss == pytest.approx(transformers_loss(model, window),
                                                             abs=ATOL)  # fmt: skip


def test_perplexity_is_token_weighted_over_uneven_windows(model, uneven_windows):
    scores = score_tokens(model, uneven_windows, batch_size=3)
    assert scores.tokens == 199
    assert scores.loss == pytest.approx(transformers_loss(model, uneven_windows), abs=ATOL)
    assert scores.perplexity == pytest.approx(math.exp(scores.loss))
    # The check can fail: the mean of window means misses it by far more than the tolerance.
    assert abs(mean_of_window_means(model, uneven_windows) - scores.loss) > 100 * ATOL
    # Batching changes nothing.
    assert score_tokens(model, uneven_windows, batch_size=1).loss == pytest.approx(scores.loss)


class NextIdModel(nn.Module):
    """Always predicts token id + 1: right on a counting sequence, wrong on a constant one."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab
        self.unused = nn.Parameter(torch.zeros(1))  # score_tokens reads the device from here

    def forward(self, ids):
        return SimpleNamespace(logits=nn.functional.one_hot((ids + 1) % self.vocab, self.vocab)
                               .float())  # fmt: skip


def test_accuracy_compares_each_prediction_with_the_next_token():
    counting = held_out_windows(torch.arange(50) % 7, seq_len=8)
    assert next_token_accuracy(NextIdModel(7), counting) == 1.0
    # Compared with the inputs instead of the targets (an off-by-one), this would be 1.0.
    constant = held_out_windows(torch.full((50,), 3), seq_len=8)
    assert next_token_accuracy(NextIdModel(7), constant) == 0.0


def test_score_refuses_bad_windows(model):
    with pytest.raises(ValueError, match="no windows"):
        score_tokens(model, [])
    with pytest.raises(ValueError, match="length >= 2"):
        score_tokens(model, [torch.tensor([1])])


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(["the cat sat on the mat. a dog ran in the park."] * 20, vocab_size=300)


def test_samples_use_the_same_seed_for_every_variant(tokenizer):
    same_a, same_b, other = (build_model(TINY, seed=s) for s in (0, 0, 1))
    prompts = ["the cat", "a dog"]
    rows = generate_samples({"a": same_a, "b": same_b, "other": other}, tokenizer, prompts,
                            max_new_tokens=8, seed=3)  # fmt: skip
    assert [row["prompt"] for row in rows] == prompts
    assert all(row["a"] == row["b"] for row in rows)  # equal models, equal text
    assert any(row["a"] != row["other"] for row in rows)
    again = generate_samples({"a": same_a}, tokenizer, prompts, max_new_tokens=8, seed=3)
    assert [row["a"] for row in again] == [row["a"] for row in rows]
    table = samples_table([{"prompt": "x|y", "a": "line\nbreak"}])
    assert table.splitlines()[2] == "x\\|y | line ⏎ break"


# The example of sacrebleu's README: BLEU 48.53 and chrF 59.73 with two reference sets.
SYSTEM = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
STREAMS = [["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
           ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."]]


def test_bleu_and_chrf_match_sacrebleus_published_example():
    per_hypothesis = [list(refs) for refs in zip(*STREAMS, strict=True)]
    assert bleu(SYSTEM, per_hypothesis).score == pytest.approx(48.53, abs=0.01)
    assert chrf(SYSTEM, per_hypothesis).score == pytest.approx(59.73, abs=0.01)
    assert "nrefs:2" in bleu(SYSTEM, per_hypothesis).signature
    assert bleu(["a b c d"], ["a b c d"]).score == pytest.approx(100)
    # References matched to the wrong hypotheses score lower: the pairing matters.
    shuffled = per_hypothesis[1:] + per_hypothesis[:1]
    assert bleu(SYSTEM, shuffled).score < 40


def test_translation_scores_refuse_mismatched_references():
    with pytest.raises(ValueError, match="3 hypotheses but 2 references"):
        bleu(SYSTEM, STREAMS)  # reference sets given where per-hypothesis lists were expected
    with pytest.raises(ValueError, match="same number"):
        chrf(SYSTEM[:2], [["a", "b"], ["c"]])
    with pytest.raises(TypeError):
        bleu("one string", ["one string"])


def test_ten_variants_compare_in_one_table(uneven_windows):
    # How long it takes is for benchmarks/ to measure: a bound here would fail on a busy machine.
    variants = {f"seed {seed}": build_model(TINY, seed=seed) for seed in range(10)}
    rows = compare_variants(variants, uneven_windows, repeats=3)
    assert [row.variant for row in rows] == list(variants)
    parameters = sum(p.numel() for p in variants["seed 0"].parameters())
    assert rows[0].parameters == parameters
    assert rows[0].perplexity == pytest.approx(score_tokens(variants["seed 0"],
                                                            uneven_windows).perplexity)  # fmt: skip
    # float32 weights: 4 bytes each, plus a small safetensors header.
    assert 4 * parameters <= size_on_disk(variants["seed 0"]) < 4 * parameters + 20_000
    header = comparison_table(rows).splitlines()[0]
    assert header == "variant | perplexity | accuracy | parameters | nonzero | size_mb | latency_ms"


def test_a_masked_model_must_be_made_permanent_before_comparing(uneven_windows):
    model = build_model(TINY)
    apply_masks(model, global_masks(model, 0.5))
    with pytest.raises(ValueError, match="make_permanent"):
        check_plain(model)
    row = compare_variants({"pruned": make_permanent(model)}, uneven_windows, repeats=1)[0]
    assert row.parameters - row.nonzero >= 0.5 * sum(
        p.numel() for n, p in model.named_parameters() if ".h." in n and n.endswith(".weight")
        and p.dim() == 2)  # fmt: skip
