"""Checks for Lab 09 (kernels and profiling), and the versions the lab falls back to."""

import torch

from llmlab.course.checks import ExerciseFailed, call, exercise, passed  # noqa: F401
from llmlab.numerics import accumulate, flushed_accumulate

# ---------------------------------------------------------------- Profiling and rooflines
# (sections 1-2 of the lab)


# ---------------------------------------------------------------- A Triton kernel
# (section 4 of the lab)


# ---------------------------------------------------------------- torch.compile and precision
# (sections 3 and 5 of the lab)

_FLUSH = "Exercise (a flushed accumulator)"


def _flush_cases() -> list[tuple[torch.Tensor, torch.dtype, int]]:
    """(values, dtype, block): lengths that are not multiples of the block, a block of one
    term, a block longer than the sum, a 1-D tensor. The values (in [0.5, 1.5), exact in bf16
    and fp16) need no rounding themselves: only the running sums do."""
    generator = torch.Generator().manual_seed(9)

    def values(*shape: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=generator) + 0.5).bfloat16().float()

    return [(values(3, 1000), torch.bfloat16, 64), (values(2, 700), torch.float16, 128),
            (values(300), torch.bfloat16, 1), (values(2, 50), torch.bfloat16, 256)]  # fmt: skip


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
    ]  # fmt: skip


def _close(got: torch.Tensor, expected: torch.Tensor, scale: float) -> bool:
    # float32 totals added in another order differ by ~1e-7 of the sum; a narrow rounding by ~1e-3
    return got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-5,
                                                          atol=1e-5 * scale)  # fmt: skip


@exercise(fallback=flushed_accumulate, fallback_name="llmlab.numerics.flushed_accumulate")
def exercise_flushed_sum(flushed_sum) -> None:
    """flushed_sum(values, dtype, block) -> the float32 sums over the last dimension, each
    block's running sum rounded to `dtype` after every add, then added into a float32 total."""
    name = _FLUSH
    for values, dtype, block in _flush_cases():
        call_text = (f"flushed_sum(<{tuple(values.shape)} values in [0.5, 1.5)>, {dtype}, "
                     f"block={block})")  # fmt: skip
        got = call(name, flushed_sum, values.clone(), dtype, block)
        expected = flushed_accumulate(values, dtype, block)
        if not isinstance(got, torch.Tensor):
            raise ExerciseFailed(f"{name}: {call_text} returned a {type(got).__name__}; return "
                                 "a tensor of sums.")  # fmt: skip
        if got.shape != expected.shape:
            raise ExerciseFailed(f"{name}: {call_text} returned shape {tuple(got.shape)}, "
                                 f"expected {tuple(expected.shape)}: sum over the last dimension "
                                 "only, one sum per row.")  # fmt: skip
        if got.dtype != torch.float32:
            raise ExerciseFailed(f"{name}: {call_text} returned {got.dtype}: the total is "
                                 "float32 (the flush exists to keep it there).")  # fmt: skip
        scale = float(values.sum(-1).abs().max())
        if _close(got, expected, scale):
            continue
        hint = next((text for wrong, text in _flush_mistakes(values, dtype, block)
                     if wrong is not None and _close(got, wrong, scale)),
                    "compare yours with llmlab.numerics.flushed_accumulate on a short sum.")
        raise ExerciseFailed(f"{name}: {call_text} returned {got.flatten()[:3].tolist()}, "
                             f"expected {expected.flatten()[:3].tolist()}: {hint}")  # fmt: skip
    passed(name, "narrow partial sums flushed into float32, on bf16 and fp16, odd lengths, "
                 "a block of one and a block longer than the sum")  # fmt: skip


# ---------------------------------------------------------------- A KV cache and inference
# (section 6 of the lab)


NOTEBOOK = "09_kernels.ipynb"
# The function or class each exercise asks for -> its check (tests/test_checks.py runs them all).
EXERCISES = {
    # profiling


    # Triton kernel


    # compile and precision
    "flushed_sum": exercise_flushed_sum,


    # KV cache and inference

}
