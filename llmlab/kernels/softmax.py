"""A fused row-wise softmax in Triton: forward and backward, one program per row.

Each program loads its whole row into one tile of next_power_of_2(n_cols) lanes, so each element
is read once and written once. Softmax written out of eager ops (max, subtract, exp, sum, divide)
runs five kernels and sends the row through memory about eight times instead.
"""

import torch
import triton
import triton.language as tl

from llmlab.kernels import check_input

MAX_COLS = 2**16  # one program holds a whole row: longer rows need a loop over tiles


@triton.jit
def softmax_forward_kernel(y_ptr, x_ptr, y_row_stride, x_row_stride, n_cols,
                           BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may pass 2**31 on a big tensor
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols  # BLOCK is a power of 2; lanes past the row stay off
    # -inf in the lanes past the row: exp(-inf) = 0 adds nothing to the sum.
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=inside, other=-float("inf"))
    x = x.to(tl.float32)  # bf16 rows are summed in fp32
    x = x - tl.max(x, axis=0)  # the largest term becomes exp(0) = 1: exp never overflows
    numerator = tl.exp(x)
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * y_row_stride + cols, y, mask=inside)


@triton.jit
def softmax_backward_kernel(dx_ptr, dy_ptr, y_ptr, dx_row_stride, dy_row_stride, y_row_stride,
                            n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    y = tl.load(y_ptr + row * y_row_stride + cols, mask=inside, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=inside, other=0.0).to(tl.float32)
    # dx_i = y_i (dy_i - sum_j dy_j y_j): the Jacobian of softmax is diag(y) - y y^T.
    dx = y * (dy - tl.sum(dy * y, axis=0))
    tl.store(dx_ptr + row * dx_row_stride + cols, dx, mask=inside)


def _rows(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` as a 2-D (rows, n_cols) view with unit column stride (a copy only if needed)."""
    check_input(name, tensor)
    if tensor.ndim == 0 or tensor.shape[-1] > MAX_COLS:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}: the kernel takes rows of 1 to "
                         f"{MAX_COLS} elements in its last dimension.")
    rows = tensor.reshape(-1, tensor.shape[-1])  # a view when the leading dims allow it
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _launch_config(n_cols: int) -> dict:
    block = triton.next_power_of_2(n_cols)
    # More warps for longer rows, so each thread keeps few elements in registers (GPU only).
    return {"BLOCK": block, "num_warps": 4 if block <= 2048 else 8 if block <= 8192 else 16}


def softmax_forward(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dimension of `x` (any leading dimensions; rows may have any stride),
    written into `out` (a new tensor when None; else 2-D (rows, n_cols), any row stride)."""
    rows = _rows("x", x)
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device) if out is None else out
    if y.shape != rows.shape or y.stride(-1) != 1:
        raise ValueError(f"out has shape {tuple(y.shape)} and strides {y.stride()}: it must be "
                         f"{tuple(rows.shape)} with unit column stride.")
    n_rows, n_cols = rows.shape
    softmax_forward_kernel[(n_rows,)](y, rows, y.stride(0), rows.stride(0), n_cols,
                                      **_launch_config(n_cols))
    return y if out is not None else y.view(x.shape)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The gradient of the loss with respect to softmax's input, from its output `y` and the
    gradient `dy` with respect to that output."""
    y_rows, dy_rows = _rows("y", y), _rows("dy", dy)
    dx = torch.empty(y_rows.shape, dtype=y.dtype, device=y.device)
    n_rows, n_cols = y_rows.shape
    softmax_backward_kernel[(n_rows,)](dx, dy_rows, y_rows, dx.stride(0), dy_rows.stride(0),
                                       y_rows.stride(0), n_cols,
                                       **_launch_config(n_cols))
    return dx.view(y.shape)


class FusedSoftmax(torch.autograd.Function):
    """Softmax over the last dimension with both passes in Triton; backward needs only y."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = softmax_forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return softmax_backward(y, dy)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of `x`, differentiable, in Triton kernels."""
    return FusedSoftmax.apply(x)
