"""The FlashAttention-style forward agrees with scaled_dot_product_attention, causal or not, on
sequence lengths that are not multiples of the tile (under Triton's interpreter on a CPU)."""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from llmlab.kernels import interpreted  # noqa: E402
from llmlab.kernels.attention import attention_forward  # noqa: E402

DEVICE = "cpu" if interpreted() else "cuda"
# On a GPU tl.dot multiplies float32 in TF32 (10-bit mantissa) by default; the interpreter exactly.
TOLERANCE = {} if interpreted() else {"rtol": 3e-3, "atol": 3e-3}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch, heads, seq_len, head_dim", [(1, 1, 1, 16), (2, 3, 37, 16),
                                                             (1, 2, 50, 32)])
def test_matches_sdpa(batch, heads, seq_len, head_dim, causal):
    generator = torch.Generator().manual_seed(seq_len)
    q, k, v = torch.randn(3, batch, heads, seq_len, head_dim, generator=generator).to(DEVICE)
    got = attention_forward(q, k, v, causal=causal, block_m=16, block_n=16)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                               **TOLERANCE)


@pytest.mark.skipif(not interpreted(), reason="a GPU's TF32 rounds scores near 1e3 by about 1")
def test_large_scores_stay_finite():
    # Scores near 1e3: exp without the running max would overflow float32.
    q, k, v = torch.randn(3, 1, 1, 40, 16, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    q, k = q * 30, k * 30
    got = attention_forward(q, k, v, causal=True, block_m=16, block_n=16)
    # Against the exact answer (float64): scores this large carry float32 rounding of about 2e-4
    # each, so every float32 attention is about 1e-4 off it, SDPA's own included, and which of
    # the CPU's kernels SDPA runs (AVX-512 or AVX2) moves its digits by as much. An overflow
    # gives inf or NaN, a missed rescaling errors of order 1.
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    torch.testing.assert_close(got.double(), exact, rtol=0, atol=1e-3)


def test_mismatched_shapes_and_bad_sizes_are_refused():
    q = torch.randn(1, 1, 8, 16, device=DEVICE)
    with pytest.raises(ValueError, match=r"got q \(1, 1, 8, 16\), k \(1, 1, 9, 16\)"):
        attention_forward(q, torch.randn(1, 1, 9, 16, device=DEVICE), q)
    odd = torch.randn(1, 1, 8, 24, device=DEVICE)
    with pytest.raises(ValueError, match="head_dim is 24: .*power of 2"):
        attention_forward(odd, odd, odd)
    with pytest.raises(ValueError, match="block_n is 8"):
        attention_forward(q, q, q, block_n=8)
