"""Checks for Lab 09 (kernels and profiling), and the versions the lab falls back to."""

import math

import torch

from llmlab.course.checks import (
    ExerciseFailed,
    ExerciseNotDone,
    call,
    call_or_fail,
    exercise,
    failure_from,
    is_close,
    passed,
    real_number,
)
from llmlab.inference.generate import greedy_generate
from llmlab.inference.kv_cache import KVCache
from llmlab.numerics import accumulate, flushed_accumulate
from llmlab.profiler import operator_cost
from llmlab.quant.fp8 import fp8_scale, saturated_cast
from llmlab.quant.fp8_training import delayed_scale_cast

# ---------------------------------------------------------------- Profiling and rooflines
# (sections 1-2 of the lab)

_COST = "Exercise 1 (an operator's cost)"


def _cost_cases() -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    """Every operator, odd sizes (no factor hides in a power of two), fp32 and bf16 both."""
    generator = torch.Generator().manual_seed(9)

    def sizes(count: int) -> tuple[int, ...]:
        return tuple(int(v) for v in torch.randint(3, 97, (count,), generator=generator))

    return [("matmul", sizes(3), torch.float32), ("matmul", sizes(3), torch.bfloat16),
            ("layer_norm", sizes(2), torch.float32), ("softmax", sizes(3), torch.float32),
            ("gelu", sizes(2), torch.bfloat16), ("layer_norm", sizes(2), torch.bfloat16),
            ("adamw", sizes(1), torch.float32), ("adamw", sizes(1), torch.bfloat16)]


def _cost_pair(call_text: str, got) -> tuple[float, float]:
    try:
        values = list(got)
    except TypeError:
        values = []
    numbers = [real_number(v) for v in values]
    if len(numbers) != 2 or None in numbers:
        raise ExerciseFailed(f"{_COST}: {call_text} returned {got!r}; return two numbers, "
                             "(FLOPs, bytes moved).")
    return numbers[0], numbers[1]


def _bytes_mistakes(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> list[tuple]:
    """(bytes a likely mistake gives, what to say) for one case."""
    size = dtype.itemsize
    _, right = operator_cost(name, shape, dtype)
    elements = math.prod(shape)
    if name == "matmul":
        m, k, n = shape
        no_output = size * (m * k + k * n)
    else:
        no_output = right - size * (3 if name == "adamw" else 1) * elements
    mistakes = [
        (no_output, "it leaves out writing the result: an output goes to memory too, and "
                    "costs as much per byte as reading an input."),
        (8 * right, "that is bits, not bytes."),
    ]
    if size != 4:
        mistakes.append((right * 4 / size, f"it counts 4 bytes per number, but {dtype} takes "
                                           f"{size}: what does dtype.itemsize say?"))
    if name == "adamw":
        mistakes += [
            (3 * size * elements, "it moves only the parameter and its gradient: AdamW keeps "
                                  "two more tensors per parameter, its moments, in memory, and "
                                  "each step needs them."),
            (5 * size * elements, "it reads the moments but never writes them back: each step "
                                  "updates them, so they go back to memory too."),
        ]
    return mistakes


@exercise(fallback=operator_cost, fallback_name="llmlab.profiler.operator_cost")
def exercise_operator_cost(cost) -> None:
    """Exercise 1: cost(name, shape, dtype) -> (FLOPs, bytes moved) for matmul, layer_norm,
    softmax, gelu and adamw, the bytes the fewest a kernel can move."""
    for name, shape, dtype in _cost_cases():
        call_text = f"operator_cost({name!r}, {shape}, {dtype})"
        flops, moved = _cost_pair(call_text, call_or_fail(_COST, call_text, cost, name, shape,
                                                          dtype))
        right_flops, right_bytes = operator_cost(name, shape, dtype)
        if name == "matmul" and is_close(flops, right_flops / 2, 1e-6):
            raise ExerciseFailed(f"{_COST}: {call_text} returned {flops:g} FLOPs, half the "
                                 f"right count, {right_flops}: each term of a dot product is a "
                                 "multiply and an add, and each counts.")
        if not is_close(flops, right_flops, 1e-6):
            per = ("" if name == "matmul" else " Take FLOPS_PER_ELEMENT[name] per element, for "
                   "every element of the shape.")
            raise ExerciseFailed(f"{_COST}: {call_text} returned {flops:g} FLOPs, expected "
                                 f"{right_flops}.{per}")
        # The weight and bias of a layer norm are tiny beside its input: with or without them.
        accepted = [right_bytes]
        if name == "layer_norm":
            accepted.append(right_bytes - 2 * shape[-1] * dtype.itemsize)
        if any(is_close(moved, value, 1e-6) for value in accepted):
            continue
        hint = next((text for value, text in _bytes_mistakes(name, shape, dtype)
                     if is_close(moved, value, 1e-6)), "")
        raise ExerciseFailed(f"{_COST}: {call_text} returned {moved:g} bytes, expected "
                             f"{right_bytes}. {hint}".strip())
    passed(_COST, "FLOPs and bytes of all five operators, in fp32 and bf16")


# ---------------------------------------------------------------- A Triton kernel
# (section 4 of the lab)

_KERNEL = "Exercise 3 (a softmax kernel in Triton)"
_POISON = -1.0  # no softmax output is negative: a -1 left in `out` was never written


def softmax_rows(x, out):
    """The lab's fallback for the softmax kernel exercise: llmlab's kernel, writing softmax over
    each row of the 2-D tensor x into out (llmlab.kernels.softmax.softmax_forward)."""
    from llmlab.kernels.softmax import softmax_forward  # Triton only when a kernel is run

    return softmax_forward(x, out)


def _strided(storage, rows: int, row_stride: int, n_cols: int):
    """A (rows, n_cols) view of `storage` whose rows start `row_stride` elements apart."""
    return storage[: rows * row_stride].view(rows, row_stride)[:, :n_cols]


def _softmax_case(rows, n_cols, x_stride, out_stride, values, device):
    """x and out inside larger buffers: NaN fills x's buffer around its rows (a kernel reading
    past a row picks it up), -1 fills all of out's buffer; each buffer runs a tile past its last
    row, so a kernel without masks stays inside memory the check owns."""
    import triton

    tail = triton.next_power_of_2(n_cols)
    x_buffer = torch.full((rows * x_stride + tail,), float("nan"), device=device)
    x = _strided(x_buffer, rows, x_stride, n_cols)
    x.copy_(values)
    out_buffer = torch.full((rows * out_stride + tail,), _POISON, device=device)
    return x, x_buffer, _strided(out_buffer, rows, out_stride, n_cols), out_buffer


def _run_kernel(name: str, call_text: str, fn, x, out) -> None:
    from triton.runtime.errors import InterpreterError

    try:
        call(name, fn, x, out)
    except Exception as error:
        # The interpreter wraps what a kernel raises: a stub's NotImplementedError too.
        if isinstance(error, InterpreterError) and isinstance(error.__cause__, NotImplementedError):
            raise ExerciseNotDone(name) from None
        raise failure_from(name, call_text, error) from error


def _softmax_mistake(x, x_buffer, got, out_buffer, expected, extreme: bool) -> str:
    """Name the mistake `got` shows, or say where it differs from torch.softmax."""
    rows, n_cols = x.shape
    if x.stride(0) != n_cols:
        packed = torch.softmax(x_buffer.as_strided(x.shape, (n_cols, 1)), dim=-1)
        if torch.allclose(got, packed, rtol=1e-4, atol=1e-6, equal_nan=True):
            return (f"x's rows start {x.stride(0)} elements apart here, and your kernel read them "
                    f"{n_cols} apart (n_cols): pass x.stride(0) as the row stride.")
    if got.stride(0) != n_cols:
        packed = out_buffer.as_strided(got.shape, (n_cols, 1))
        if torch.allclose(packed, expected, rtol=1e-4, atol=1e-6):
            return (f"out's rows start {got.stride(0)} elements apart here, and your kernel "
                    f"wrote them {n_cols} apart (n_cols): pass out.stride(0) as its row "
                    "stride.")
    if (got == _POISON).any():
        return ("some elements of out were never written (the check fills out with -1 first): "
                "does every row get a program, do the lanes cover the whole row, and are the "
                "pointers passed in the order the kernel takes them?")
    if torch.isnan(got).any() or torch.isinf(got).any():
        if extreme:
            return ("inf or NaN on rows with entries near +-1e4: exp(1e4) overflows float32 to "
                    "inf, and inf / inf is NaN (exp(-1e4) underflows to 0, and 0 / 0 too). "
                    "Subtract the row's maximum before exp: softmax does not change, and the "
                    "largest term becomes exp(0) = 1 (any other entry can leave a term above "
                    "it).")
        return ("NaN in your output, where the input has none: your kernel read past the end of "
                "a row (the check keeps NaN in the memory after each row). Lanes at or past "
                "n_cols must stay off: mask the load.")
    block = 1 << max(n_cols - 1, 0).bit_length()  # next power of 2
    zeros = torch.zeros(rows, block - n_cols, device=x.device)
    zero_padded = torch.softmax(torch.cat([x, zeros], dim=-1), dim=-1)[:, :n_cols]
    if block > n_cols and torch.allclose(got, zero_padded, rtol=1e-4, atol=1e-6):
        return ("your rows sum to less than 1: the lanes past the row were loaded as 0, and "
                "exp(0 - max) counts in the sum. Load them as -inf (the `other` of tl.load), "
                "so exp gives 0 there.")
    error = (got - expected).abs()
    row, col = divmod(int(error.argmax()), n_cols)
    return (f"differs from torch.softmax by up to {error.max().item():.3g}: at row {row}, column "
            f"{col}, x = {x[row, col].item():.6g}, expected {expected[row, col].item():.6g}, got "
            f"{got[row, col].item():.6g}.")


@exercise(fallback=softmax_rows, fallback_name="llmlab.kernels.softmax.softmax_forward")
def exercise_softmax_kernel(fn) -> None:
    """The softmax kernel exercise: fn(x, out) writes softmax over each row of the 2-D float32
    tensor x into out, any row strides; compared with torch.softmax."""
    from llmlab.kernels import check_triton_mode, interpreted

    check_triton_mode()
    name, device = _KERNEL, "cpu" if interpreted() else "cuda"
    generator = torch.Generator().manual_seed(9)
    row = [1e4, -1e4, 0.0, 1e4 - 3, 9999.5, -float("inf"), 1e4, 20.0, 1e4, -5.0, 1e4 - 1, 3.0,
           1e4 - 50]
    # Rows 2 and 3 start with a small entry: subtracting the first entry instead of the maximum
    # still overflows there.
    extreme = torch.tensor([row, row, row[1:] + row[:1], row[1:] + row[:1]])
    extreme[1::2] -= 2e4  # every entry near -1e4 (or -inf)
    # (what the case adds, rows, n_cols, x's row stride, out's row stride, values)
    cases = [("4 rows of 16", 4, 16, 16, 16, None), ("5 rows of 37", 5, 37, 37, 37, None),
             ("one element", 1, 1, 1, 1, None), ("3 rows of 3", 3, 3, 3, 3, None),
             ("2 rows of 1000", 2, 1000, 1000, 1000, None),
             ("rows 50 apart in x, 40 in out", 6, 37, 50, 40, None),
             ("entries of +-1e4 and -inf", 4, 13, 16, 13, extreme)]
    for what, rows, n_cols, x_stride, out_stride, values in cases:
        if values is None:
            values = 3 * torch.randn(rows, n_cols, generator=generator)
        x, x_buffer, out, out_buffer = _softmax_case(rows, n_cols, x_stride, out_stride,
                                                     values.to(device), device)
        shapes = f"x {tuple(x.shape)} with row stride {x_stride}, out {out_stride}"
        _run_kernel(name, f"my_softmax(<{what}: {shapes}>)", fn, x, out)
        expected = torch.softmax(x, dim=-1)
        text = f"{name}: {what} ({shapes})"
        outside = torch.ones_like(out_buffer, dtype=torch.bool)
        _strided(outside, rows, out_stride, n_cols).fill_(False)
        if not torch.allclose(out, expected, rtol=1e-4, atol=1e-6):
            mistake = _softmax_mistake(x, x_buffer, out, out_buffer, expected, values is extreme)
            raise ExerciseFailed(f"{text}: {mistake}")
        if (out_buffer[outside] != _POISON).any():
            raise ExerciseFailed(f"{text}: your kernel wrote past the end of a row (the check "
                                 "watches the memory after each row of out). Mask the store "
                                 "as well as the load.")
    passed(name, "agrees with torch.softmax on 7 cases: odd row lengths (1, 3, 37, 1000), "
                 "strided rows in x and in out, entries of +-1e4 and -inf; nothing written "
                 "outside the rows")



# ---------------------------------------------------------------- torch.compile and precision
# (sections 3 and 5 of the lab)

_FLUSH = "Exercise 2 (a flushed accumulator)"


def _flush_cases() -> list[tuple[torch.Tensor, torch.dtype, int]]:
    """(values, dtype, block): lengths that are not multiples of the block, a block of one
    term, a block longer than the sum, a 1-D tensor. The values (in [0.5, 1.5), exact in bf16
    and fp16) need no rounding themselves: only the running sums do."""
    generator = torch.Generator().manual_seed(9)

    def values(*shape: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=generator) + 0.5).bfloat16().float()

    return [(values(3, 1000), torch.bfloat16, 64), (values(2, 700), torch.float16, 128),
            (values(300), torch.bfloat16, 1), (values(2, 50), torch.bfloat16, 256)]


def _flush_mistakes(values: torch.Tensor, dtype: torch.dtype, block: int) -> list:
    """(what a likely mistake returns, the hint that names it), for one case."""
    length = values.shape[-1]
    starts = range(0, length, block)
    blocks = [values[..., start : start + block] for start in starts]
    ends = [min(start + block, length) for start in starts]
    full = length // block * block  # the terms in whole blocks
    narrow_total = torch.zeros(values.shape[:-1], dtype=dtype)
    for part in blocks:
        narrow_total = (narrow_total.float() + accumulate(part, dtype)).to(dtype)
    return [
        (accumulate(values, dtype),
         "your sum is never flushed: the whole running sum stayed in the narrow dtype. Add each "
         "block's partial sum into a float32 total, then start the next block's from zero."),
        (sum(accumulate(values[..., :end], dtype) for end in ends),
         "the partial sum is not reset after it is added to the total, so every block adds the "
         "earlier blocks again. Start each block's partial sum from zero."),
        (flushed_accumulate(values[..., :full], dtype, block) if full else None,
         "the last, shorter block is missing: the length is not always a multiple of the block "
         "(range and slicing past the end are your friends here)."),
        (narrow_total.float(),
         "your total is rounded to the narrow dtype too. Only the partial sums are narrow: the "
         "total they are flushed into is float32, or its error grows with the length again."),
        (sum(part.to(dtype).sum(-1).float() for part in blocks),
         "each block's sum is rounded once, at its end. torch's .sum() of a bf16 or fp16 tensor "
         "adds in float32 inside the kernel (as every reduction kernel does) and rounds only the "
         "result: round the running sum yourself after every single add."),
        (values.double().sum(-1).float(),
         "your result has no rounding error at all: nothing was summed in the narrow dtype. "
         "Round the running partial sum to dtype after every add."),
    ]


def _close(got: torch.Tensor, expected: torch.Tensor, scale: float) -> bool:
    # float32 totals added in another order differ by ~1e-7 of the sum; a narrow rounding by ~1e-3
    return got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-5,
                                                          atol=1e-5 * scale)


@exercise(fallback=flushed_accumulate, fallback_name="llmlab.numerics.flushed_accumulate")
def exercise_flushed_sum(flushed_sum) -> None:
    """flushed_sum(values, dtype, block) -> the float32 sums over the last dimension, each
    block's running sum rounded to `dtype` after every add, then added into a float32 total."""
    name = _FLUSH
    for values, dtype, block in _flush_cases():
        call_text = (f"flushed_sum(<{tuple(values.shape)} values in [0.5, 1.5)>, {dtype}, "
                     f"block={block})")
        got = call_or_fail(name, call_text, flushed_sum, values.clone(), dtype, block)
        expected = flushed_accumulate(values, dtype, block)
        if not isinstance(got, torch.Tensor):
            raise ExerciseFailed(f"{name}: {call_text} returned a {type(got).__name__}; return "
                                 "a tensor of sums.")
        if got.shape != expected.shape:
            raise ExerciseFailed(f"{name}: {call_text} returned shape {tuple(got.shape)}, "
                                 f"expected {tuple(expected.shape)}: sum over the last dimension "
                                 "only, one sum per row.")
        if got.dtype != torch.float32:
            raise ExerciseFailed(f"{name}: {call_text} returned {got.dtype}: the total is "
                                 "float32 (the flush exists to keep it there).")
        scale = float(values.sum(-1).abs().max())
        if _close(got, expected, scale):
            continue
        hint = next((text for wrong, text in _flush_mistakes(values, dtype, block)
                     if wrong is not None and _close(got, wrong, scale)),
                    "compare yours with llmlab.numerics.flushed_accumulate on a short sum.")
        raise ExerciseFailed(f"{name}: {call_text} returned {got.flatten()[:3].tolist()}, "
                             f"expected {expected.flatten()[:3].tolist()}: {hint}")
    passed(name, "narrow partial sums flushed into float32, on bf16 and fp16, odd lengths, "
                 "a block of one and a block longer than the sum")


# ---------------------------------------------------------------- A KV cache and inference
# (section 6 of the lab)

_KV = "Exercise 4 (a KV cache)"


def _attention(q, k, v, visible=None):
    """Softmax attention written out (the reference, independent of scaled_dot_product_attention):
    `visible[i, j]` says whether query i may see key j."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    return scores.softmax(-1) @ v


def _positions(cache, n_new: int, call_text: str) -> list[int]:
    got = call_or_fail(_KV, call_text, cache.positions, n_new)
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
        call_text = f"attend({layer}, q, k, v) with a 5-token prompt"
        out = call_or_fail(_KV, call_text, cache.attend, layer, q, k, v)
        _same_shape(out, q, call_text)
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
    ):
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
    cache = call_or_fail(_KV, f"{cache_class.__name__}({layers})", cache_class, layers)
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
            call_text = f"attend({layer}, q, k, v) for one new token after {position} cached"
            out = call_or_fail(_KV, call_text, cache.attend, layer, q, k, v)
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
    generated = call_or_fail(_KV, "greedy_generate(<a small GPT-2>, <2 prompts of 6 tokens>, "
                             f"12, {cache_class.__name__})", greedy_generate, model, prompt, 12,
                             cache_class)
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


# ---------------------------------------------------------------- FP8 training

_DELAYED = "Exercise 5 (delayed fp8 scaling)"
_FORMATS = (torch.float8_e4m3fn, torch.float8_e5m2)


def _delayed_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, torch.dtype]]:
    """(what the case adds, x, amax history newest first, fp8 dtype): the history's largest amax
    in its oldest slot (a history updated first would drop it), another above x's; x spiking past
    the history (a cast without saturation overflows: inf in e5m2); gradient-sized values;
    histories of 1, 4 and 16 steps."""
    generator = torch.Generator().manual_seed(9)

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    # Dropping the oldest (20) leaves 12, above x's amax (~6): neither is the right 20.
    oldest_largest = torch.cat([rand(1) * 3, torch.tensor([12.0]), rand(1) * 3,
                                torch.tensor([20.0])])
    return [("the largest amax 4 steps back", randn(16, 24) * 2, oldest_largest, _FORMATS[0]),
            ("x spiking past 16 steps of history", randn(32) * 8, rand(16) + 1, _FORMATS[0]),
            ("x spiking past 4 steps of history", randn(8, 8) * 8, rand(4) + 1, _FORMATS[1]),
            ("gradient-sized values", randn(8, 8) * 1e-6, rand(4) * 1e-5, _FORMATS[1]),
            ("a history of 1 step", randn(24), rand(1) * 9, _FORMATS[0])]


def _delayed_triple(call_text: str, got) -> tuple:
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise ExerciseFailed(f"{_DELAYED}: {call_text} returned {type(got).__name__}; return "
                             "three things: (x_fp8, scale, new_history).")
    x_fp8, scale, history = got
    scale = real_number(scale.item() if isinstance(scale, torch.Tensor) and scale.numel() == 1
                        else scale)
    if scale is None:
        raise ExerciseFailed(f"{_DELAYED}: {call_text} returned {got[1]!r} for the scale; return "
                             "one number (or a one-element tensor): the tensor is per-tensor "
                             "scaled.")
    if not isinstance(history, torch.Tensor):
        raise ExerciseFailed(f"{_DELAYED}: {call_text} returned a {type(history).__name__} for "
                             "the history; return a tensor, as the history came in.")
    return x_fp8, scale, history


def _delayed_scale_mistake(scale: float, x, history, dtype) -> str:
    """Name the mistake a wrong scale matches."""
    other = next(f for f in _FORMATS if f != dtype)
    amax = x.abs().amax()
    updated = (torch.cat([amax.reshape(1), history[:-1]]).max(),
               torch.cat([history[1:], amax.reshape(1)]).max())
    right = float(fp8_scale(history.max(), dtype))
    for wrong, text in (
        (1 / right, "that is max / amax, the reciprocal (Transformer Engine and torchao keep "
                    "that one and multiply by it). Here the scale is what brings values back: "
                    "x is about x_fp8 * scale."),
        (float(fp8_scale(updated[0], dtype)), _UPDATED_FIRST),
        (float(fp8_scale(updated[1], dtype)), _UPDATED_FIRST),
        (float(fp8_scale(amax, dtype)), "it comes from this tensor's own amax: that is dynamic "
                                        "scaling. Delayed scaling takes the largest amax of "
                                        "the history, and looks at x only to record it."),
        (float(history.max()) / torch.finfo(other).max,
         f"it puts the amax on {other}'s max, not {dtype}'s: ask torch.finfo(fp8_dtype)."),
    ):
        if is_close(scale, wrong, 1e-5):
            return text
    return f"expected {right:.6g}: the history's largest amax over the format's largest value."


_UPDATED_FIRST = ("the history was updated with this tensor's amax before the scale was taken "
                  "from it: the scale is the past steps' (this amax joins the history after use, "
                  "and the oldest entry leaves it).")


def _delayed_values_mistake(x_fp8, x, scale: float, dtype) -> str:
    """Name the mistake wrong fp8 values match."""
    if not torch.isfinite(x_fp8.float()).all():
        return ("inf or NaN where x is finite: x / scale lies beyond the format's max where x "
                "outgrew the history. Clamp to +-torch.finfo(fp8_dtype).max before the cast "
                "(saturate).")
    limit = torch.finfo(dtype).max
    if torch.equal(x_fp8.float(), (x * scale).clamp(-limit, limit).to(dtype).float()):
        return "x was multiplied by the scale: divide by it (x is about x_fp8 * scale)."
    return "they are not x / scale, clamped to the format's range, cast to fp8_dtype."


def _delayed_history_mistake(got, history, x, scale: float) -> str:
    """Name the mistake a wrong new history matches."""
    if got.shape == history.shape and torch.equal(got, history):
        return "it is the history as it came in: record this tensor's amax in it."
    if got.numel() == history.numel() + 1:
        return (f"it grew to {got.numel()} entries: drop the oldest, so the history keeps the "
                f"last {history.numel()} steps.")
    if is_close(float(got.max()), float((x / scale).abs().amax()), 1e-5):
        return "it records the amax of x / scale: record x's own amax, before any scale."
    return ("expected this tensor's amax in front (or at the end) and the oldest entry dropped "
            "from the other end.")


@exercise(fallback=delayed_scale_cast,
          fallback_name="llmlab.quant.fp8_training.delayed_scale_cast")
def exercise_delayed_scaling(delayed_scale_cast_fn) -> None:
    """delayed_scale_cast(x, amax_history, fp8_dtype) -> (x_fp8, scale, new_history): the scale
    from the history's largest amax (x is about x_fp8.float() * scale), x / scale saturated and
    cast, then x's amax recorded at one end of the history and the oldest entry dropped."""
    name = _DELAYED
    for what, x, history, dtype in _delayed_cases():
        call_text = (f"delayed_scale_cast(<{what}: x {tuple(x.shape)}>, <{history.numel()} amaxes, "
                     f"largest {history.max().item():.3g}>, {dtype})")
        got = call_or_fail(name, call_text, delayed_scale_cast_fn, x.clone(), history.clone(),
                           dtype)
        x_fp8, scale, new_history = _delayed_triple(call_text, got)
        if not isinstance(x_fp8, torch.Tensor) or x_fp8.dtype != dtype or x_fp8.shape != x.shape:
            form = (f"{x_fp8.dtype} of shape {tuple(x_fp8.shape)}"
                    if isinstance(x_fp8, torch.Tensor) else type(x_fp8).__name__)
            raise ExerciseFailed(f"{name}: {call_text} returned {form} for x_fp8; expected "
                                 f"{dtype} of shape {tuple(x.shape)}: cast x / scale to it.")
        right_scale = float(fp8_scale(history.max(), dtype))
        if not is_close(scale, right_scale, 1e-5):
            raise ExerciseFailed(f"{name}: {call_text} returned scale {scale:.6g}: "
                                 f"{_delayed_scale_mistake(scale, x, history, dtype)}")
        expected = saturated_cast(x, torch.tensor(scale), dtype)  # the learner's own scale
        if not torch.equal(x_fp8.float(), expected.float()):
            raise ExerciseFailed(f"{name}: {call_text}: the fp8 values are wrong: "
                                 f"{_delayed_values_mistake(x_fp8, x, scale, dtype)}")
        amax = x.abs().amax().reshape(1)
        accepted = (torch.cat([amax, history[:-1]]), torch.cat([history[1:], amax]))
        if not any(new_history.shape == h.shape and torch.allclose(new_history.float(), h,
                                                                   rtol=1e-6)
                   for h in accepted):
            raise ExerciseFailed(f"{name}: {call_text} returned the history "
                                 f"{new_history.flatten()[:4].tolist()}...: "
                                 f"{_delayed_history_mistake(new_history, history, x, scale)}")
    passed(name, "the scale from the history's largest amax, x saturated into e4m3 and e5m2, "
                 "the history rolled after use, on histories of 1, 4 and 16 steps")


NOTEBOOK = "09_kernels.ipynb"
# The function or class each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "operator_cost": exercise_operator_cost,
    "my_softmax": exercise_softmax_kernel,
    "flushed_sum": exercise_flushed_sum,
    "MyKVCache": exercise_kv_cache,
    "delayed_scale_cast": exercise_delayed_scaling,
}
# Other definitions of the notebook an exercise's function calls
# (tests/course/checks/test_every_lab.py loads them).
HELPERS = ("my_softmax_kernel",)
