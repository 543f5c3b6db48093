"""Checks for Lab 09 (kernels and profiling), and the versions the lab falls back to."""

import math

import torch

from llmlab.course.checks import ExerciseFailed, call, exercise, is_close, passed, real_number
from llmlab.profiler import operator_cost

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
            ("adamw", sizes(1), torch.float32), ("adamw", sizes(1), torch.bfloat16)]  # fmt: skip


def _cost_pair(call_text: str, got) -> tuple[float, float]:
    try:
        values = list(got)
    except TypeError:
        values = []
    numbers = [real_number(v) for v in values]
    if len(numbers) != 2 or None in numbers:
        raise ExerciseFailed(f"{_COST}: {call_text} returned {got!r}; return two numbers, "
                             "(FLOPs, bytes moved).")  # fmt: skip
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
    ]  # fmt: skip
    if size != 4:
        mistakes.append((right * 4 / size, f"it counts 4 bytes per number, but {dtype} takes "
                                           f"{size}: what does dtype.itemsize say?"))  # fmt: skip
    if name == "adamw":
        mistakes += [
            (3 * size * elements, "it moves only the parameter and its gradient: AdamW keeps "
                                  "two more tensors per parameter, its moments, in memory, and "
                                  "each step needs them."),
            (5 * size * elements, "it reads the moments but never writes them back: each step "
                                  "updates them, so they go back to memory too."),
        ]  # fmt: skip
    return mistakes


@exercise(fallback=operator_cost, fallback_name="llmlab.profiler.operator_cost")
def exercise_operator_cost(cost) -> None:
    """Exercise 1: cost(name, shape, dtype) -> (FLOPs, bytes moved) for matmul, layer_norm,
    softmax, gelu and adamw, the bytes the fewest a kernel can move."""
    for name, shape, dtype in _cost_cases():
        call_text = f"operator_cost({name!r}, {shape}, {dtype})"
        flops, moved = _cost_pair(call_text, call(_COST, cost, name, shape, dtype))
        right_flops, right_bytes = operator_cost(name, shape, dtype)
        if name == "matmul" and is_close(flops, right_flops / 2, 1e-6):
            raise ExerciseFailed(f"{_COST}: {call_text} returned {flops:g} FLOPs, half the "
                                 f"right count, {right_flops}: each term of a dot product is a "
                                 "multiply and an add, and each counts.")  # fmt: skip
        if not is_close(flops, right_flops, 1e-6):
            per = ("" if name == "matmul" else " Take FLOPS_PER_ELEMENT[name] per element, for "
                   "every element of the shape.")  # fmt: skip
            raise ExerciseFailed(f"{_COST}: {call_text} returned {flops:g} FLOPs, expected "
                                 f"{right_flops}.{per}")  # fmt: skip
        # The weight and bias of a layer norm are tiny beside its input: with or without them.
        accepted = [right_bytes]
        if name == "layer_norm":
            accepted.append(right_bytes - 2 * shape[-1] * dtype.itemsize)
        if any(is_close(moved, value, 1e-6) for value in accepted):
            continue
        hint = next((text for value, text in _bytes_mistakes(name, shape, dtype)
                     if is_close(moved, value, 1e-6)), "")  # fmt: skip
        raise ExerciseFailed(f"{_COST}: {call_text} returned {moved:g} bytes, expected "
                             f"{right_bytes}. {hint}".strip())  # fmt: skip
    passed(_COST, "FLOPs and bytes of all five operators, in fp32 and bf16")


# ---------------------------------------------------------------- A Triton kernel
# (section 4 of the lab)


# ---------------------------------------------------------------- torch.compile and precision
# (sections 3 and 5 of the lab)


# ---------------------------------------------------------------- A KV cache and inference
# (section 6 of the lab)


NOTEBOOK = "09_kernels.ipynb"
# The function or class each exercise asks for -> its check (tests/test_checks.py runs them all).
EXERCISES = {
    # profiling
    "operator_cost": exercise_operator_cost,


    # Triton kernel


    # compile and precision


    # KV cache and inference

}
