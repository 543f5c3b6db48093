"""decoder_forward is GPT-2's own forward written out: with FullAttention it gives transformers'
logits; with a KVCache fed the prompt and then one token at a time, the same logits again.
Mistakes caught: positions that restart at 0 after the prompt, a cache that is replaced rather
than extended, a single new query masked as if it were the first token."""

import pytest
import torch
from helpers.train_fakes import tiny_gpt2, token_ids

from llmlab.inference.kv_cache import FullAttention, KVCache, decoder_forward


@pytest.fixture(scope="module")
def model():
    return tiny_gpt2(width=32, context=48).eval()


def text(length, batch=2, seed=0):
    return token_ids(batch, length, seed)


def test_full_attention_gives_transformers_logits(model):
    ids = text(20)
    with torch.no_grad():
        expected = model(ids).logits
    torch.testing.assert_close(decoder_forward(model, ids, FullAttention()), expected)


def test_a_cache_fed_token_by_token_gives_the_same_logits(model):
    ids = text(20)
    with torch.no_grad():
        expected = model(ids).logits
    cache = KVCache(model.config.n_layer)
    pieces = [decoder_forward(model, ids[:, :8], cache)]  # the prompt at once
    pieces += [decoder_forward(model, ids[:, i : i + 1], cache) for i in range(8, 20)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), expected, atol=1e-5, rtol=1e-5)
    assert len(cache) == 20


def test_the_cache_grows_by_the_tokens_fed_and_positions_follow():
    cache = KVCache(n_layers=2)
    assert cache.positions(3).tolist() == [0, 1, 2]
    for layer in range(2):
        cache.attend(layer, *(torch.randn(1, 2, 3, 4) for _ in range(3)))
    assert len(cache) == 3 and cache.positions(1).tolist() == [3]
    for layer in range(2):
        cache.attend(layer, *(torch.randn(1, 2, 1, 4) for _ in range(3)))
    assert len(cache) == 4 and cache.keys[1].shape == (1, 2, 4, 4)


def test_a_single_new_token_sees_every_cached_key():
    cache = KVCache(n_layers=1)
    k, v = torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8)
    cache.attend(0, torch.randn(1, 1, 4, 8), k, v)
    q, k_new, v_new = (torch.randn(1, 1, 1, 8) for _ in range(3))
    got = cache.attend(0, q, k_new, v_new)
    keys, values = torch.cat([k, k_new], 2), torch.cat([v, v_new], 2)
    expected = (q @ keys.transpose(-2, -1) / 8**0.5).softmax(-1) @ values
    torch.testing.assert_close(got, expected)
