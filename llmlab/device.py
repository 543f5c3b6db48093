"""Choose the device and the training dtype, each with the reason; seed; mixed-precision autocast;
the CPU in place of a CUDA device a machine does not have.

The dtype rule is the one the course teaches, written as a pure function
(`training_dtype_for`) so it can be read and tested without the hardware it describes.
"""

import contextlib
import os
import random
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from llmlab.env import cpu_info


@dataclass(frozen=True)
class DeviceChoice:
    """The device to use and, in words, why it was chosen."""

    device: torch.device
    reason: str


def choose_device(prefer: str | None = None) -> DeviceChoice:
    """Pick `prefer` ("cpu", "cuda", "cuda:1", "mps"), or the best device present when None.

    Raises ValueError when the preferred device is not on this machine.
    """
    if prefer is None:
        return _best_available_device()
    device = torch.device(prefer)
    if device.type == "cuda":
        return _cuda_choice(device.index or 0)
    if device.type == "mps":
        return _mps_choice()
    if device.type == "cpu":
        return DeviceChoice(device, "the CPU was asked for")
    raise ValueError(f"unsupported device {prefer!r}: use 'cpu', 'cuda', 'cuda:N' or 'mps'")


def _best_available_device() -> DeviceChoice:
    if torch.cuda.is_available():
        return _cuda_choice(0)
    if torch.backends.mps.is_available():
        return _mps_choice()
    return DeviceChoice(torch.device("cpu"), "no CUDA GPU found: using the CPU")


def _cuda_choice(index: int) -> DeviceChoice:
    if not torch.cuda.is_available():
        raise ValueError(
            f"a CUDA GPU was asked for, but this PyTorch ({torch.__version__}, CUDA "
            f"{torch.version.cuda or 'not compiled in'}) sees none: run on a machine with an "
            "NVIDIA GPU and a CUDA build of PyTorch, or choose 'cpu'"
        )
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"cuda:{index} was asked for, but only {count} GPU(s) found")
    name = torch.cuda.get_device_name(index)
    return DeviceChoice(torch.device("cuda", index), f"CUDA GPU {index}: {name}")


def _mps_choice() -> DeviceChoice:
    if not torch.backends.mps.is_available():
        raise ValueError("the Apple MPS device was asked for but is not available: choose 'cpu'")
    return DeviceChoice(torch.device("mps"), "Apple GPU (MPS) found, no CUDA GPU")


# The course's one table of training dtype names; the planner's bytes per value, the benchmarks'
# and the trainer's choices are all read from it.
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_DTYPE_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """The course's short name of a training dtype: "bf16" for torch.bfloat16."""
    if dtype not in _DTYPE_NAMES:
        raise ValueError(f"{dtype} is not a training dtype: use one of {list(_DTYPE_NAMES)}")
    return _DTYPE_NAMES[dtype]


@dataclass(frozen=True)
class DtypeChoice:
    """The autocast (compute) dtype; float32 means no mixed precision."""

    dtype: torch.dtype
    use_grad_scaler: bool
    reason: str

    @property
    def name(self) -> str:
        """Short name: "bf16", "fp16" or "fp32"."""
        return dtype_name(self.dtype)


def training_dtype_for(
    device_type: str,
    capability: tuple[int, int] | None = None,
    cpu_fast_bf16: bool = False,
) -> DtypeChoice:
    """The course's mixed-precision rule for a device type, its CUDA capability or CPU flags."""
    if device_type == "cuda":
        if capability is None:
            raise ValueError("a CUDA device needs its compute capability, e.g. (8, 0)")
        return _cuda_dtype(capability)
    if device_type == "cpu":
        return _cpu_dtype(cpu_fast_bf16)
    if device_type == "mps":
        reason = "mixed precision on MPS is not covered by the course"
        return DtypeChoice(torch.float32, False, reason)
    raise ValueError(f"no dtype rule for device type {device_type!r}: use 'cuda', 'cpu' or 'mps'")


def _cuda_dtype(capability: tuple[int, int]) -> DtypeChoice:
    cc = f"{capability[0]}.{capability[1]}"
    if capability >= (8, 0):
        return DtypeChoice(
            torch.bfloat16,
            False,
            f"compute capability {cc} (Ampere or newer): tensor cores run bf16 at the fp16 rate "
            "and bf16 has the range of fp32, so no loss scaling is needed",
        )
    if capability >= (7, 0):
        return DtypeChoice(
            torch.float16,
            True,
            f"compute capability {cc} (Volta/Turing): tensor cores have fp16 but not bf16; "
            "a grad scaler keeps small fp16 gradients from flushing to zero",
        )
    return DtypeChoice(
        torch.float32,
        False,
        f"compute capability {cc} (before Volta): no tensor cores, and most of these GPUs run fp16 "
        "no faster than fp32 (the P100 is the exception, at 2x); fp32 is the safe default",
    )


def _cpu_dtype(cpu_fast_bf16: bool) -> DtypeChoice:
    if cpu_fast_bf16:
        return DtypeChoice(
            torch.bfloat16, False, "this CPU has bf16 instructions (AVX512-BF16/AMX or Arm BF16)"
        )
    return DtypeChoice(
        torch.float32, False, "this CPU has no bf16 instructions (or oneDNN is capped below "
        "them): bf16 would be emulated, about 100x slower than fp32"
    )


def choose_dtype(device: torch.device | str) -> DtypeChoice:
    """Apply `training_dtype_for` to the live machine's `device`."""
    device = torch.device(device)
    if device.type == "cuda":
        return training_dtype_for("cuda", capability=torch.cuda.get_device_capability(device))
    if device.type == "cpu":
        return training_dtype_for("cpu", cpu_fast_bf16=cpu_info().fast_bf16)
    return training_dtype_for(device.type)


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed Python, NumPy and PyTorch; `deterministic=True` also forbids nondeterministic ops."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds the CPU and every CUDA device
    if deterministic:
        # cuBLAS reuses workspace buffers between streams unless given this fixed configuration.
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    # True: an op with no deterministic implementation raises instead of silently varying.
    # False: turns that check off again (it is process-wide).
    torch.use_deterministic_algorithms(deterministic)


# Replaces every pin's count when set. The test command sets it to 1: it runs two notebooks side
# by side on two cores, where one thread each is faster than two (it compares no number that a
# thread count moves: nbval-lax).
THREADS_OVERRIDE = "LLMLAB_CPU_THREADS"


def pin_cpu_threads(device: torch.device | str, threads: int = 1) -> None:
    """A fixed number of math threads on the CPU (one unless asked), so that every machine
    computes the same numbers: PyTorch splits a sum among its threads and rounds each part, so
    the thread count changes the last bits of a sum, and over a fine-tune and greedy decoding,
    which tokens come out. What fixes the numbers is the count, not the cores: a machine with
    fewer cores than `threads` runs them in turn, slower, to the same result. A GPU's results
    do not depend on the host's threads: nothing changes there. LLMLAB_CPU_THREADS, when set,
    replaces `threads`."""
    override = os.environ.get(THREADS_OVERRIDE, "").strip()
    if override:
        if not override.isdigit():
            raise ValueError(f"{THREADS_OVERRIDE}={override!r}: give a whole number of threads, "
                             f"1 or more, or unset it")
        threads = int(override)
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    if torch.device(device).type == "cpu":
        torch.set_num_threads(threads)


def autocast(
    device: torch.device | str, dtype: torch.dtype
) -> contextlib.AbstractContextManager[object]:
    """Run the enclosed ops in `dtype` (bf16/fp16 mixed precision); float32 changes nothing."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def device_or_cpu(device: str | torch.device | None, library: str) -> torch.device:
    """The device a library was asked to run on (the CPU when None), or the CPU with a warning
    when it is a CUDA device and this machine has none: a notebook run on a laptop finishes
    (slower) instead of stopping."""
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and not torch.cuda.is_available():
        warnings.warn(
            f"{device} was asked for but this machine has no CUDA GPU: {library} runs on the CPU "
            "instead (the same numbers, more slowly)",
            stacklevel=3,
        )
        return torch.device("cpu")
    return device
