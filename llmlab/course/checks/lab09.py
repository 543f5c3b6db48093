"""Checks for Lab 09 (kernels and profiling), and the versions the lab falls back to."""

import torch

from llmlab.course.checks import ExerciseFailed, call, exercise, passed  # noqa: F401
from llmlab.inference.generate import greedy_generate
from llmlab.inference.kv_cache import KVCache

# ---------------------------------------------------------------- Profiling and rooflines
# (sections 1-2 of the lab)


# ---------------------------------------------------------------- A Triton kernel
# (section 4 of the lab)


# ---------------------------------------------------------------- torch.compile and precision
# (sections 3 and 5 of the lab)


# ---------------------------------------------------------------- A KV cache and inference
# (section 6 of the lab)

_KV = "The KV-cache exercise"


def _attention(q, k, v, visible=None):
    """Softmax attention written out (the reference, independent of scaled_dot_product_attention):
    `visible[i, j]` says whether query i may see key j."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    return scores.softmax(-1) @ v


def _positions(cache, n_new: int, call_text: str) -> list[int]:
    got = call(_KV, cache.positions, n_new)
    try:
        positions = torch.as_tensor(got)
    except (TypeError, ValueError, RuntimeError):
        positions = None
    if positions is None or positions.is_floating_point() or positions.is_complex():
        raise ExerciseFailed(f"{_KV}: {call_text} returned {got!r}; return the positions as a "
                             "tensor of integers, one per new token (the position embedding "
                             "looks them up).")
    return positions.flatten().tolist()


def _prefill(cache, layers, generator) -> list[tuple]:
    """Feed a 5-token prompt to every layer; returns each layer's (k, v)."""
    got = _positions(cache, 5, "positions(5) on an empty cache")
    if got != list(range(5)):
        raise ExerciseFailed(f"{_KV}: positions(5) on an empty cache returned {got}; a prompt "
                             "of 5 tokens in an empty cache sits at positions [0, 1, 2, 3, 4].")
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    kept = []
    for layer in range(layers):
        q, k, v = (torch.randn(2, 3, 5, 4, generator=generator) for _ in range(3))
        out = call(_KV, cache.attend, layer, q, k, v)
        _same_shape(out, q, f"attend({layer}, q, k, v) with a 5-token prompt")
        if not torch.allclose(out, _attention(q, k, v, causal), atol=1e-5):
            raise ExerciseFailed(f"{_KV}: attend({layer}, q, k, v) with a 5-token prompt in an "
                                 f"empty cache: {_prefill_mistake(out, q, k, v, layer)}")
        kept.append((k, v))
    return kept


def _prefill_mistake(out, q, k, v, layer: int) -> str:
    """Name the mistake a prompt's output matches."""
    if layer:
        return _OWN_LAYER
    if torch.allclose(out, _attention(q, k, v), atol=1e-5):
        return ("every prompt token sees the tokens after it: when several new tokens are fed at "
                "once, each may only see the keys up to its own position (a causal mask).")
    if torch.allclose(out, _attention(q, v, k, torch.ones(5, 5, dtype=torch.bool).tril()),
                      atol=1e-5):
        return _SWAPPED
    return ("it is not softmax(q k^T / sqrt(head_dim)) v with a causal mask: compare yours with "
            "torch.nn.functional.scaled_dot_product_attention.")


_OWN_LAYER = ("layer 0 is right but this layer is not: does each layer keep its own keys and "
              "values?")
_SWAPPED = ("keys and values are swapped: the query is compared with the keys, and the values "
            "are what is averaged.")


def _same_shape(out, q, call_text: str) -> None:
    if not isinstance(out, torch.Tensor) or out.shape != q.shape:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ExerciseFailed(f"{_KV}: {call_text} returned {shape}; return the attention "
                             f"output, one vector per new query: shape {tuple(q.shape)}.")


def _step_mistake(out, q, k, v, old_k, old_v) -> str:
    """Name the mistake a one-token step's output matches (k, v: this step's; old: cached)."""
    all_k, all_v = torch.cat([old_k, k], -2), torch.cat([old_v, v], -2)
    first_only = torch.zeros(1, all_k.shape[-2], dtype=torch.bool)
    first_only[0, 0] = True
    for wrong, text in (
        (_attention(q, k, v), "the new query attends over its own key only: the cache was "
         "overwritten with this step's keys and values instead of extended by them."),
        (_attention(q, all_k, all_v, first_only), "the new query sees only the first cached key: "
         "a causal mask built for queries and keys of the same length (is_causal=True, or "
         "tril of a square) aligns the single new query with key 0. The newest token may see "
         "every cached key."),
        (_attention(q, old_k, old_v), "the new query attends over the cached keys but not its "
         "own: add this step's keys and values to the cache before attending."),
        (_attention(q, all_v, all_k), _SWAPPED),
    ):  # fmt: skip
        if torch.allclose(out, wrong, atol=1e-5):
            return text
    return ("it is not the attention of the new query over every cached key and value (the "
            "prompt's and each step's, in order).")


@exercise(fallback=KVCache, fallback_name="llmlab.inference.kv_cache.KVCache")
def exercise_kv_cache(cache_class) -> None:
    """cache_class(n_layers) -> an object with positions(n_new) and attend(layer, q, k, v), fed a
    prompt into an empty cache and then one token at a time; checked on random tensors (with
    each likely mistake named), then by greedy generation on a small GPT-2 against full
    recomputation by transformers."""
    generator = torch.Generator().manual_seed(9)
    layers = 2
    cache = call(_KV, cache_class, layers)
    cached = _prefill(cache, layers, generator)
    for step in range(2):  # two steps: the cache must keep growing, not hold the last token only
        position = 5 + step
        got = _positions(cache, 1, f"positions(1) after {position} tokens")
        if got != [position]:
            hint = (" The position offset is missing: a new token's position starts where the "
                    "cached ones end." if got == [0] else "")
            raise ExerciseFailed(f"{_KV}: positions(1) after {position} tokens were cached "
                                 f"returned {got}; expected [{position}].{hint}")
        for layer in range(layers):
            q, k, v = (torch.randn(2, 3, 1, 4, generator=generator) for _ in range(3))
            out = call(_KV, cache.attend, layer, q, k, v)
            call_text = f"attend({layer}, q, k, v) for one new token after {position} cached"
            _same_shape(out, q, call_text)
            old_k, old_v = cached[layer]
            if not torch.allclose(out, _attention(q, torch.cat([old_k, k], -2),
                                                  torch.cat([old_v, v], -2)), atol=1e-5):
                hint = _OWN_LAYER if layer else _step_mistake(out, q, k, v, old_k, old_v)
                raise ExerciseFailed(f"{_KV}: {call_text}: {hint}")
            cached[layer] = (torch.cat([old_k, k], -2), torch.cat([old_v, v], -2))
    _generates_like_recomputation(cache_class)
    passed(_KV, "positions continue from the cache, each step appends and attends over every "
                "cached key, and greedy generation with it matches full recomputation token "
                "for token")


def _generates_like_recomputation(cache_class) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(9)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=32, vocab_size=64)
    model = GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(9))
    generated = call(_KV, greedy_generate, model, prompt, 12, cache_class)
    with torch.no_grad():  # one forward over the whole text: the logits of every step at once
        full = model(torch.cat([prompt, generated.tokens[:, :-1]], 1)).logits[:, 5:]
    if not torch.equal(generated.tokens, full.argmax(-1)) or not torch.allclose(
            generated.logits, full, atol=1e-4):
        worst = (generated.logits - full).abs().max().item()
        raise ExerciseFailed(f"{_KV}: greedy generation with your cache on a small GPT-2 "
                             f"(2 layers) differs from recomputing the whole text (largest logit "
                             f"difference {worst:.3g}), though each call above was right: are "
                             "positions or attend relying on something these tests fed the same "
                             "way every time (batch size, head count, dtype, device)?")


NOTEBOOK = "09_kernels.ipynb"
# The function or class each exercise asks for -> its check (tests/test_checks.py runs them all).
EXERCISES = {
    # profiling


    # Triton kernel


    # compile and precision


    # KV cache and inference
    "MyKVCache": exercise_kv_cache,

}
