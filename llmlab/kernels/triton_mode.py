"""Where the course's Triton kernels run here: on a GPU, or under Triton's interpreter (numpy on
the CPU) where there is no NVIDIA driver; and the refusal, with what to do, of what cannot run.
Nothing here imports torch or triton at import time: llmlab's own start-up calls
`use_interpreter_without_driver` before anything else can import Triton."""

import ctypes
import os


def _cuda_driver_present() -> bool:
    # Loading the driver's library starts nothing on a GPU, so this is safe before a fork
    # (asking CUDA for its devices is not).
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def use_interpreter_without_driver() -> None:
    """Without an NVIDIA driver, switch Triton to its interpreter (a user's own value wins).

    It must happen before Triton is imported: triton.language decorates its own functions
    (tl.max, tl.sum) then, in the mode TRITON_INTERPRET names at that moment, and torch.compile
    or transformers may import Triton long before a kernel of ours is defined.
    """
    if "TRITON_INTERPRET" not in os.environ and not _cuda_driver_present():
        os.environ["TRITON_INTERPRET"] = "1"


def interpreted() -> bool:
    """True when Triton kernels run under the interpreter (on the CPU)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def check_triton_mode() -> None:
    """Fail with what to do when Triton cannot run a kernel here: no GPU and no interpreter, or
    an interpreter switched on after Triton was imported (its own functions, tl.max and the
    rest, were then made for a GPU, and the interpreter stops at the first with a riddle)."""
    import torch  # here, not at the top: llmlab's start-up imports this package without torch
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    fix = ("set TRITON_INTERPRET=1 in the environment before Python starts, or import llmlab "
           "before triton (llmlab sets it on a machine without an NVIDIA driver), then restart "
           "Python (in Jupyter: restart the kernel).")
    if not interpreted() and not torch.cuda.is_available():
        raise RuntimeError(f"There is no CUDA device and Triton's interpreter is off: {fix}")
    if interpreted() and not isinstance(tl.max, InterpretedFunction):
        raise RuntimeError(f"Triton was imported before its interpreter was switched on: {fix}")


def check_input(name: str, tensor) -> None:
    """Refuse a tensor the kernels cannot take here, saying what to do instead."""
    import torch

    check_triton_mode()
    if interpreted() and tensor.dtype != torch.float32:
        raise ValueError(
            f"{name} is {tensor.dtype}, but without a CUDA device the kernels run under Triton's "
            "interpreter, which the course uses in float32 only (numpy has no bfloat16): pass "
            f"{name}.float(), or run on a GPU."
        )
    wanted = "cpu" if interpreted() else "cuda"
    if tensor.device.type != wanted:
        raise ValueError(f"{name} is on {tensor.device}; the kernels run on {wanted} here: "
                         f"move it with {name}.to({wanted!r}).")
