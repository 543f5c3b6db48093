"""Lab 09's checks accept correct answers in their several forms and reject likely mistakes, each
with a message that names it. (tests/course/checks/test_every_lab.py proves they pass on the
solution notebook and say "not done yet" on the generated stub.)"""

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers.checks import BUG_NAMED, buggy, fails, stub

from llmlab import profiler
from llmlab.course.checks import lab09 as check
from llmlab.inference.kv_cache import KVCache
from llmlab.numerics import flushed_accumulate
from llmlab.quant.fp8_training import delayed_scale_cast

# ---------------------------------------------------------------- Profiling and rooflines


def cost(name, shape, dtype, *, multiply_add=True, output=True, size=None, moments=True,
         moment_writes=True, unit=1, form=tuple, norm_parameters=True):
    """A learner's operator_cost with one switch per likely mistake (defaults: a correct one)."""
    size = size or dtype.itemsize
    if name == "matmul":
        m, k, n = shape
        flops = (2 if multiply_add else 1) * m * k * n
        moved = m * k + k * n + (m * n if output else 0)
    else:
        elements = math.prod(shape)
        flops = profiler.FLOPS_PER_ELEMENT[name] * elements
        if name == "adamw":
            reads = 4 if moments else 2  # parameter, gradient (and the two moments)
            writes = (3 if moments and moment_writes else 1) if output else 0
            moved = (reads + writes) * elements
        else:
            moved = (2 if output else 1) * elements
            if name == "layer_norm" and norm_parameters:
                moved += 2 * shape[-1]
    return form((flops, moved * size * unit))


def test_operator_cost_passes_in_several_forms(capsys):
    check.exercise_operator_cost(cost)
    check.exercise_operator_cost(functools.partial(cost, form=list))
    check.exercise_operator_cost(functools.partial(cost, norm_parameters=False))
    as_tensors = functools.partial(cost, form=lambda pair: tuple(torch.tensor(float(v))
                                                                 for v in pair))
    check.exercise_operator_cost(as_tensors)
    check.exercise_operator_cost(functools.partial(cost, form=np.array))
    check.exercise_operator_cost(profiler.operator_cost)
    assert capsys.readouterr().out.count("PASSED") == 6


def test_operator_cost_rejects_a_matmul_counted_as_one_flop_per_term():
    fails(check.exercise_operator_cost, functools.partial(cost, multiply_add=False),
          "multiply and an add")


def test_operator_cost_rejects_forgetting_the_write_of_the_output():
    fails(check.exercise_operator_cost, functools.partial(cost, output=False),
          "leaves out writing the result")


def test_operator_cost_rejects_fp32_bytes_for_a_bf16_tensor():
    fails(check.exercise_operator_cost, functools.partial(cost, size=4),
          r"4 bytes per number, but torch.bfloat16 takes 2")


def test_operator_cost_rejects_adamw_without_its_moments():
    fails(check.exercise_operator_cost, functools.partial(cost, moments=False),
          "only the parameter and its gradient")


def test_operator_cost_rejects_adamw_moments_read_but_never_written():
    fails(check.exercise_operator_cost, functools.partial(cost, moment_writes=False),
          "never writes them back")


def test_operator_cost_rejects_bits_for_bytes():
    fails(check.exercise_operator_cost, functools.partial(cost, unit=8), "bits, not bytes")


def test_operator_cost_rejects_an_answer_that_is_not_a_pair():
    fails(check.exercise_operator_cost, lambda name, shape, dtype: 12.0, r"return two numbers")


def test_operator_cost_on_the_stub_returns_llmlab_s_version(capsys):
    assert check.exercise_operator_cost(stub) is profiler.operator_cost
    assert "not done yet" in capsys.readouterr().out


# ---------------------------------------------------------------- A Triton kernel

# One kernel with a switch per classic mistake: each test turns one on and the check must name it.
triton = pytest.importorskip("triton")
tl = triton.language


@triton.jit
def _softmax_kernel(y_ptr, x_ptr, y_row_stride, x_row_stride, n_cols, BLOCK: tl.constexpr,
                    SUBTRACT: tl.constexpr, PAD: tl.constexpr, MASK_LOAD: tl.constexpr,
                    MASK_STORE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    if MASK_LOAD:
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=inside, other=PAD)
    else:
        x = tl.load(x_ptr + row * x_row_stride + cols)
    if SUBTRACT == "max":
        x = x - tl.max(x, axis=0)
    elif SUBTRACT == "first":  # the row's first entry, as if it were the largest
        x = x - tl.load(x_ptr + row * x_row_stride)
    numerator = tl.exp(x)
    y = numerator / tl.sum(numerator, axis=0)
    if MASK_STORE:
        tl.store(y_ptr + row * y_row_stride + cols, y, mask=inside)
    else:
        tl.store(y_ptr + row * y_row_stride + cols, y)


def softmax_with(subtract="max", pad=-float("inf"), mask_load=True, mask_store=True,
                 x_stride=None, out_stride=None, block_factor=1):
    """A launcher for `_softmax_kernel`; x_stride="n_cols" or out_stride="n_cols" passes the
    row length where the row stride belongs."""

    def launch(x, out):
        n_cols = x.shape[1]
        _softmax_kernel[(x.shape[0],)](
            out, x, n_cols if out_stride == "n_cols" else out.stride(0),
            n_cols if x_stride == "n_cols" else x.stride(0), n_cols,
            BLOCK=triton.next_power_of_2(n_cols) * block_factor, SUBTRACT=subtract,
            PAD=pad, MASK_LOAD=mask_load, MASK_STORE=mask_store)

    return launch


def softmax_by_copies(x, out):
    """Correct another way: contiguous copies in and out, the kernel on those."""
    packed = torch.empty(x.shape)
    softmax_with()(x.contiguous(), packed)
    out.copy_(packed)


@pytest.mark.parametrize("answer", [check.softmax_rows, softmax_with(), softmax_by_copies,
                                    softmax_with(block_factor=2)])
def test_softmax_kernel_passes_correct_kernels(answer, capsys):
    assert check.exercise_softmax_kernel(answer) is answer
    assert "PASSED" in capsys.readouterr().out


def test_softmax_kernel_names_a_missing_max_subtraction():
    fails(check.exercise_softmax_kernel, softmax_with(subtract=None),
          r"\+-1e4.*exp\(1e4\) overflows.*Subtract the row's maximum")


def test_softmax_kernel_names_the_first_entry_subtracted_for_the_maximum():
    fails(check.exercise_softmax_kernel, softmax_with(subtract="first"),
          r"\+-1e4.*overflows.*Subtract the row's maximum")


def test_softmax_kernel_names_lanes_loaded_as_zero():
    fails(check.exercise_softmax_kernel, softmax_with(pad=0.0),
          r"5 rows of 37.*loaded as 0.*-inf")


def test_softmax_kernel_names_a_load_past_the_row():
    fails(check.exercise_softmax_kernel, softmax_with(mask_load=False, mask_store=True),
          r"5 rows of 37.*read past the end of a row.*mask the load")


def test_softmax_kernel_names_a_store_past_the_row():
    fails(check.exercise_softmax_kernel, softmax_with(mask_store=False),
          r"5 rows of 37.*wrote past the end of a row.*Mask the store")


def test_softmax_kernel_names_n_cols_as_the_row_stride_of_x():
    fails(check.exercise_softmax_kernel, softmax_with(x_stride="n_cols"),
          r"rows 50 apart in x.*read them 37 apart \(n_cols\): pass x.stride\(0\)")


def test_softmax_kernel_names_n_cols_as_the_row_stride_of_out():
    fails(check.exercise_softmax_kernel, softmax_with(out_stride="n_cols"),
          r"40 elements apart.*wrote them 37 apart \(n_cols\): pass out.stride\(0\)")


def test_softmax_kernel_names_an_output_never_written():
    def swapped(x, out):  # the pointers in the wrong order: the kernel writes into x
        softmax_with()(out, x)

    fails(check.exercise_softmax_kernel, swapped, r"never written.*order the kernel takes them")


@triton.jit
def _odd_block_kernel(y_ptr, x_ptr):
    tl.store(y_ptr + tl.arange(0, 3), tl.load(x_ptr + tl.arange(0, 3)))  # 3: not a power of 2


def test_softmax_kernel_an_error_inside_the_kernel_is_named_with_its_input():
    fails(check.exercise_softmax_kernel, lambda x, out: _odd_block_kernel[(1,)](out, x),
          r"my_softmax\(<4 rows of 16: .*\) raised ")


def test_softmax_kernel_not_done_falls_back_to_llmlabs(capsys):
    assert check.exercise_softmax_kernel(stub) is check.softmax_rows
    assert "not done yet" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="what happens without a GPU")
def test_softmax_kernel_without_a_gpu_or_the_interpreter_says_what_to_do(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="Triton's interpreter is off: set TRITON_INTERPRET=1"):
        check.exercise_softmax_kernel(softmax_with())


@triton.jit
def _stub_kernel(y_ptr, x_ptr):
    raise NotImplementedError("the hint")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs a kernel's raise")
def test_softmax_kernel_with_a_stub_for_a_body_is_not_done_yet(capsys):
    def launch(x, out):
        _stub_kernel[(x.shape[0],)](out, x)

    assert check.exercise_softmax_kernel(launch) is check.softmax_rows
    assert "not done yet" in capsys.readouterr().out



# ---------------------------------------------------------------- torch.compile and precision


def flushed_sum(*, flush=True, reset=True, last_block=True, narrow_total=False, torch_sum=False,
                narrow=True, out_dtype=torch.float32, keep_dims=False):
    """A learner's flushed accumulator with one switch per likely mistake (defaults: a correct
    one, written the way the exercise asks: a loop over the terms, rounding after every add)."""

    def answer(values, dtype, block):
        length = values.shape[-1]
        stop = length if last_block else length // block * block
        total = torch.zeros(values.shape[:-1], dtype=dtype if narrow_total else torch.float32)
        partial = torch.zeros(values.shape[:-1], dtype=dtype if narrow else torch.float32)
        for start in range(0, stop, block):
            if torch_sum:
                partial = values[..., start : start + block].to(dtype).sum(-1)
            else:
                for term in values[..., start : start + block].unbind(-1):
                    partial = (partial + term).to(dtype if narrow else torch.float32)
            if flush:
                total = (total + partial.float()).to(total.dtype)
                if reset:
                    partial = torch.zeros_like(partial)
        if not flush:
            total = partial.float()
        result = total.to(out_dtype)
        return result.unsqueeze(-1) if keep_dims else result

    return answer


def vectorised(values, dtype, block):
    """Another correct form: the running sums of all rows at once, in the narrow dtype's own
    arithmetic (bf16 + bf16 is computed in float32 and rounded once, like the exercise asks)."""
    total = torch.zeros(values.shape[:-1])
    for part in values.split(block, dim=-1):
        partial = torch.zeros(values.shape[:-1], dtype=dtype)
        for column in part.unbind(-1):
            partial = partial + column.to(dtype)
        total += partial.float()
    return total


def test_flushed_sum_accepts_right_answers_in_their_forms(capsys):
    for answer in (flushed_sum(), vectorised, flushed_accumulate):
        assert check.exercise_flushed_sum(answer) is answer
    assert capsys.readouterr().out.count("PASSED") == 3


@pytest.mark.parametrize(
    ("switch", "match"),
    [
        (dict(flush=False), "never flushed"),
        (dict(reset=False), "not reset after it is added"),
        (dict(last_block=False), "last, shorter block is missing"),
        (dict(narrow_total=True), "total is rounded to the narrow dtype too"),
        (dict(torch_sum=True), "rounded once, at its end"),
        (dict(narrow=False), "no rounding error at all"),
        (dict(out_dtype=torch.bfloat16), "returned torch.bfloat16: the total is float32"),
        (dict(keep_dims=True), r"returned shape \(3, 1\), expected \(3,\)"),
    ],
)
def test_flushed_sum_rejects_likely_mistakes(switch, match):
    fails(check.exercise_flushed_sum, flushed_sum(**switch), match)


def test_flushed_sum_rejects_a_number_and_names_an_unknown_mistake():
    fails(check.exercise_flushed_sum, lambda values, dtype, block: 0.0, "returned a float")
    fails(check.exercise_flushed_sum, lambda values, dtype, block: values.sum(-1) * 0.9,
          "compare yours with llmlab.numerics.flushed_accumulate")


def test_flushed_sum_on_the_stub_returns_llmlab_s_version(capsys):
    assert check.exercise_flushed_sum(stub) is flushed_accumulate
    assert "not done yet" in capsys.readouterr().out


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


# ---------------------------------------------------------------- FP8 training


def delayed(*, from_history=True, update_first=False, saturate=True, multiply=False,
            max_dtype=None, record=True, drop_oldest=True, newest_last=False, scale_form=None):
    """A learner's delayed_scale_cast with one switch per likely mistake (defaults: a correct
    one)."""

    def answer(x, amax_history, fp8_dtype):
        amax = x.abs().max().reshape(1)
        if newest_last:
            updated = torch.cat([amax_history[1 if drop_oldest else 0:], amax])
        else:
            updated = torch.cat([amax, amax_history[:-1] if drop_oldest else amax_history])
        seen = updated if update_first else amax_history
        limit = torch.finfo(max_dtype or fp8_dtype).max
        scale = (seen.max() if from_history else amax[0]) / limit
        scaled = x * scale if multiply else x / scale
        if saturate:
            top = torch.finfo(fp8_dtype).max
            scaled = scaled.clamp(-top, top)
        form = scale_form or (lambda value: value)
        return scaled.to(fp8_dtype), form(scale), updated if record else amax_history

    return answer


@pytest.mark.parametrize("answer", [
    delayed_scale_cast, delayed(), delayed(newest_last=True),
    delayed(scale_form=lambda scale: scale.item()), delayed(scale_form=lambda scale: scale[None]),
], ids=["llmlab", "switches", "newest last", "a float scale", "a 1-element scale"])
def test_delayed_scaling_passes_correct_answers(answer, capsys):
    check.exercise_delayed_scaling(answer)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("switch, match", [
    ({"from_history": False}, "dynamic scaling"),
    ({"update_first": True}, "updated with this tensor's amax before"),
    ({"update_first": True, "newest_last": True}, "updated with this tensor's amax before"),
    ({"saturate": False}, "Clamp to"),
    ({"multiply": True}, "multiplied by the scale"),
    ({"max_dtype": torch.float8_e5m2}, "ask torch.finfo"),
    ({"record": False}, "record this tensor's amax"),
    ({"drop_oldest": False}, "drop the oldest"),
], ids=["dynamic", "updated first", "updated first, newest last", "no saturation",
        "multiplied", "e5m2's max", "not recorded", "oldest kept"])
def test_delayed_scaling_rejects_likely_mistakes(switch, match):
    fails(check.exercise_delayed_scaling, delayed(**switch), match)


def test_delayed_scaling_names_a_reciprocal_scale_and_a_wrong_form():
    fails(check.exercise_delayed_scaling,
          delayed(scale_form=lambda scale: 1 / scale), "the reciprocal")
    fails(check.exercise_delayed_scaling,
          lambda x, history, dtype: delayed()(x, history, dtype)[:2], "return three things")
    fails(check.exercise_delayed_scaling,
          lambda x, history, dtype: (x.clone(), *delayed()(x, history, dtype)[1:]),
          "for x_fp8; expected torch.float8")


def test_delayed_scaling_on_the_stub_returns_llmlab_s_version(capsys):
    assert check.exercise_delayed_scaling(stub) is delayed_scale_cast
    assert "not done yet" in capsys.readouterr().out


def test_the_lab_names_its_notebook():
    assert check.NOTEBOOK == "09_kernels.ipynb"


@pytest.mark.parametrize("exercise", list(check.EXERCISES.values()),
                         ids=list(check.EXERCISES))
def test_an_error_in_an_answer_is_named_with_its_input(exercise):
    fails(exercise, buggy, BUG_NAMED)
