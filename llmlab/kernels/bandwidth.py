"""The memory traffic of a softmax: the bytes eager ops move (counted on any device), and the
bandwidth each implementation reaches on a GPU (timed).

A softmax does a handful of FLOPs per element, so its time is the time to move its bytes.
"""

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from llmlab.gpu_specs import find_gpu_spec
from llmlab.kernels.softmax import softmax_forward


def eager_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension written out of eager ops, as model code without a fused
    kernel would: each line runs its own kernel, which reads its inputs from memory and writes
    its result back."""
    shifted = x - x.amax(dim=-1, keepdim=True)
    numerator = shifted.exp()
    return numerator / numerator.sum(dim=-1, keepdim=True)


def _tensor_bytes(tree) -> int:
    leaves, _ = tree_flatten(tree)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


class CountBytes(TorchDispatchMode):
    """Records each PyTorch op run inside it with the bytes of the tensors it takes (read) and
    returns (written): in eager mode each op is one trip through memory."""

    def __init__(self):
        super().__init__()
        self.ops: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        read, written = _tensor_bytes((args, kwargs)), _tensor_bytes(out)
        self.ops.append({"op": func.overloadpacket.__name__, "bytes read": read,
                         "bytes written": written})
        return out


def eager_traffic(fn, *args) -> list[dict]:
    """The ops `fn(*args)` runs, each with the bytes it reads and writes."""
    with CountBytes() as counter:
        fn(*args)
    return counter.ops


def softmax_bandwidth(rows: int = 8192, cols: int = 4096, dtype: torch.dtype = torch.bfloat16,
                      device: torch.device | str = "cuda") -> list[dict]:
    """Time softmax over a (rows, cols) tensor on a GPU four ways; for each, the time and the
    bandwidth achieved counting one read and one write per element (what a fused kernel needs),
    with its share of the card's datasheet bandwidth where llmlab knows the card."""
    from triton.testing import do_bench  # GPU only; it clears the L2 cache between runs

    x = torch.randn(rows, cols, dtype=dtype, device=device)
    needed = 2 * x.numel() * x.element_size()
    spec = find_gpu_spec(torch.cuda.get_device_name(device))
    candidates = {
        "eager ops (max, sub, exp, sum, div)": eager_softmax,
        "torch.softmax (PyTorch's fused kernel)": lambda t: torch.softmax(t, dim=-1),
        "torch.compile(eager ops)": torch.compile(eager_softmax),
        "Triton (llmlab.kernels.softmax)": softmax_forward,
    }
    table = []
    for name, fn in candidates.items():
        milliseconds = do_bench(lambda fn=fn: fn(x))
        gbs = needed / milliseconds / 1e6
        share = (
            "unknown card"
            if spec is None
            else f"{gbs / spec.bandwidth_gbs:.0%} of {spec.bandwidth_gbs:.0f} GB/s"
        )
        table.append({"softmax": name, "time (us)": round(milliseconds * 1e3, 1),
                      "GB/s": round(gbs), "of datasheet": share})
    return table
