"""Triton kernels the course writes in Lab 09: a fused row-wise softmax (forward and backward)
and a FlashAttention-style attention forward.

Without an NVIDIA GPU they run under Triton's interpreter, which executes each program with
numpy on the CPU: for checking kernels, not for speed. The course runs it in float32 only: numpy
has no bfloat16, and triton 3.7's interpreter emulates only part of it (loads, stores and casts
work; bf16 arithmetic with a constant fails). Importing this package imports neither torch nor
triton: llmlab's own start-up calls `use_interpreter_without_driver` from it (`triton_mode`).
"""

from llmlab.kernels.triton_mode import (
    check_input,
    check_triton_mode,
    interpreted,
    use_interpreter_without_driver,
)

__all__ = ["check_input", "check_triton_mode", "interpreted", "use_interpreter_without_driver"]
