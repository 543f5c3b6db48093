"""Lab 09's checks accept correct answers in their several forms and reject likely mistakes,
each with a message that names it. (tests/test_checks.py proves they pass on the solution
notebook and say "not done yet" on the generated stub.)"""

import math

import pytest
import torch
import torch.nn.functional as F

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab09 as check
from llmlab.inference.kv_cache import KVCache


def fails(check_fn, answer, match):
    with pytest.raises(ExerciseFailed, match=match):
        check_fn(answer)


def stub(*args, **kwargs):
    raise NotImplementedError("the hint")


# ---------------------------------------------------------------- Profiling and rooflines


# ---------------------------------------------------------------- A Triton kernel


# ---------------------------------------------------------------- torch.compile and precision


# ---------------------------------------------------------------- A KV cache and inference


class ChunkCache:
    """A correct cache in another form: a list of chunks per layer, joined when attending, and
    the prompt's causal mask from is_causal (the cache is empty then)."""

    def __init__(self, n_layers):
        self.chunks = [[] for _ in range(n_layers)]

    def positions(self, n_new):
        cached = sum(k.shape[-2] for k, _ in self.chunks[0])
        return list(range(cached, cached + n_new))  # a list, not a tensor

    def attend(self, layer, q, k, v):
        first = not self.chunks[layer]
        self.chunks[layer].append((k, v))
        keys = torch.cat([k for k, _ in self.chunks[layer]], dim=2)
        values = torch.cat([v for _, v in self.chunks[layer]], dim=2)
        return F.scaled_dot_product_attention(q, keys, values, is_causal=first)


class StaticCache:
    """A correct cache in a third form: buffers allocated once, a length counter, softmax
    written out."""

    def __init__(self, n_layers, capacity=64):
        self.n_layers, self.capacity, self.length = n_layers, capacity, 0
        self.keys = self.values = None

    def positions(self, n_new):
        return torch.arange(n_new) + self.length

    def attend(self, layer, q, k, v):
        if self.keys is None:
            shape = (self.n_layers, *k.shape[:2], self.capacity, k.shape[-1])
            self.keys, self.values = torch.zeros(shape), torch.zeros(shape)
        start, n_new = self.length, k.shape[2]
        self.keys[layer, :, :, start : start + n_new] = k
        self.values[layer, :, :, start : start + n_new] = v
        if layer == self.n_layers - 1:
            self.length += n_new
        keys = self.keys[layer, :, :, : start + n_new]
        values = self.values[layer, :, :, : start + n_new]
        scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])
        future = torch.ones(n_new, start + n_new, dtype=torch.bool).triu(start + 1)
        return scores.masked_fill(future, float("-inf")).softmax(-1) @ values


@pytest.mark.parametrize("cache_class", [KVCache, ChunkCache, StaticCache])
def test_kv_cache_passes_on_correct_forms(cache_class, capsys):
    assert check.exercise_kv_cache(cache_class) is cache_class
    assert "PASSED" in capsys.readouterr().out


def test_kv_cache_stub_is_not_done_and_falls_back(capsys):
    assert check.exercise_kv_cache(stub) is KVCache
    assert "not done yet" in capsys.readouterr().out


class NoOffset(KVCache):
    def positions(self, n_new):
        return torch.arange(n_new)


def test_kv_cache_names_a_forgotten_position_offset():
    fails(check.exercise_kv_cache, NoOffset, "position offset is missing")


class Overwrites(KVCache):
    def attend(self, layer, q, k, v):
        self.keys[layer], self.values[layer] = k, v
        return F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1)


def test_kv_cache_names_an_overwritten_cache():
    fails(check.exercise_kv_cache, Overwrites, "overwritten with this step's keys")


class AlwaysCausal(KVCache):
    def attend(self, layer, q, k, v):
        if self.keys[layer] is not None:
            k, v = torch.cat([self.keys[layer], k], 2), torch.cat([self.values[layer], v], 2)
        self.keys[layer], self.values[layer] = k, v
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_kv_cache_names_a_causal_mask_that_hides_the_cache():
    fails(check.exercise_kv_cache, AlwaysCausal, "aligns the single new query with key 0")


class AttendsBeforeAppending(KVCache):
    def attend(self, layer, q, k, v):
        if self.keys[layer] is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            self.keys[layer], self.values[layer] = k, v
            return out
        out = F.scaled_dot_product_attention(q, self.keys[layer], self.values[layer])
        self.keys[layer] = torch.cat([self.keys[layer], k], 2)
        self.values[layer] = torch.cat([self.values[layer], v], 2)
        return out


def test_kv_cache_names_a_query_that_misses_its_own_key():
    fails(check.exercise_kv_cache, AttendsBeforeAppending, "cached keys but not its own")


class SwapsKeysAndValues(KVCache):
    def attend(self, layer, q, k, v):
        return super().attend(layer, q, v, k)


def test_kv_cache_names_swapped_keys_and_values():
    fails(check.exercise_kv_cache, SwapsKeysAndValues, "keys and values are swapped")


class SharedAcrossLayers(KVCache):
    def attend(self, layer, q, k, v):
        return super().attend(0, q, k, v)


def test_kv_cache_names_one_cache_shared_by_all_layers():
    fails(check.exercise_kv_cache, SharedAcrossLayers, "each layer keep its own keys")


class NoPromptMask(KVCache):
    def attend(self, layer, q, k, v):
        super().attend(layer, q, k, v)
        return F.scaled_dot_product_attention(q, self.keys[layer], self.values[layer])


def test_kv_cache_names_a_prompt_without_a_causal_mask():
    fails(check.exercise_kv_cache, NoPromptMask, "sees the tokens after it")


class ReturnsAllPositions(KVCache):
    def positions(self, n_new):
        return torch.arange(len(self) + n_new)


def test_kv_cache_refuses_positions_of_the_whole_text():
    fails(check.exercise_kv_cache, ReturnsAllPositions, r"expected \[5\]")


class MergesHeads(KVCache):
    def attend(self, layer, q, k, v):
        return super().attend(layer, q, k, v).transpose(1, 2).flatten(-2)


def test_kv_cache_asks_for_the_output_shape():
    fails(check.exercise_kv_cache, MergesHeads, r"shape \(2, 3, 5, 4\)")


class FloatPositions(KVCache):
    def positions(self, n_new):
        return torch.arange(n_new, dtype=torch.float32) + len(self)


def test_kv_cache_asks_for_integer_positions():
    fails(check.exercise_kv_cache, FloatPositions, "tensor of integers")


class OffsetFromStepCount(KVCache):
    """Right on the unit steps (5-token prompt, then single tokens) by luck: the offset is the
    number of positions() calls plus 4. Generation's prompt has 6 tokens, so it goes wrong."""

    def __init__(self, n_layers):
        super().__init__(n_layers)
        self.calls = 0

    def positions(self, n_new):
        self.calls += 1
        start = 0 if self.calls == 1 else self.calls + 3
        return torch.arange(start, start + n_new)


def test_kv_cache_generation_catches_what_the_unit_steps_miss():
    fails(check.exercise_kv_cache, OffsetFromStepCount, "differs from recomputing")


def test_the_lab_names_its_notebook():
    assert check.NOTEBOOK == "09_kernels.ipynb"
